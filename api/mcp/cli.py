"""``slotward mcp``: the tools over MCP, on stdio (the default) or streamable HTTP.

Embedded on the store ``--db`` names (the global flag, or this command's own),
or against a server (``--url``). The API key comes from ``--key`` or the
environment's ``SLOTWARD_API_KEY`` (api/cli/main.py passes the environment in:
nothing else reads it); over streamable HTTP a request's own bearer key wins.
docs/mcp.md.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import socket
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import replace
from types import FrameType

import uvicorn

from slotward.api.config import Config
from slotward.api.mcp.command import _STDIO, KEY_VARIABLE, add_mcp_parser
from slotward.api.mcp.embedded import open_embedded
from slotward.api.mcp.remote import check_url, open_remote
from slotward.api.mcp.server import Backend, SlotwardMCP
from slotward.api.mcp.workflows import SessionWorkflows
from slotward.engine.errors import ConfigError

__all__ = ["KEY_VARIABLE", "add_mcp_parser", "run_mcp"]

_PATH = "/mcp"
_STOPS = (signal.SIGINT, signal.SIGTERM)


def run_mcp(config: Config, args: argparse.Namespace, environ: Mapping[str, str]) -> int:
    """Serve until the client hangs up (stdio) or a signal stops the server (HTTP)."""
    key = args.key or environ.get(KEY_VARIABLE) or None
    if args.transport == _STDIO and key is None:
        raise ConfigError(
            f"slotward mcp over stdio needs an API key: --key or {KEY_VARIABLE} "
            "(slotward keys create prints one)"
        )
    if args.workflow is not None and not 1 <= len(args.workflow) <= 255:
        raise ConfigError("--workflow must be 1 to 255 characters")
    if args.mcp_db is not None:
        config = replace(config, db_url=args.mcp_db)
    asyncio.run(_serve(config, args, key))
    return 0


async def _serve(config: Config, args: argparse.Namespace, key: str | None) -> None:
    async with _backend(config, args, key) as backend:
        workflows = SessionWorkflows(args.workflow, stdio=args.transport == _STDIO)
        server = SlotwardMCP(backend, workflows, key=key)
        if args.transport == _STDIO:
            await server.run_stdio_async()
        else:
            await _serve_http(server, args.host, args.port)


@asynccontextmanager
async def _backend(
    config: Config, args: argparse.Namespace, key: str | None
) -> AsyncIterator[Backend]:
    if args.url is not None:
        async with open_remote(check_url(args.url)) as remote:
            yield remote
    else:
        async with open_embedded(config, key) as embedded:
            yield embedded


async def _serve_http(server: SlotwardMCP, host: str, port: int) -> None:
    """Streamable HTTP at ``/mcp``; the bound port is printed (``--port 0`` picks one)."""
    app = server.streamable_http_app(streamable_http_path=_PATH, host=host)
    sock = socket.create_server((host, port))
    try:
        bound = sock.getsockname()[1]
        print(f"slotward mcp serving http://{host}:{bound}{_PATH}", flush=True)
        # log_config=None: uvicorn's records go through slotward's logging (api/logs.py).
        settings = uvicorn.Config(app, log_config=None, access_log=False)
        # uvicorn stops on SIGINT or SIGTERM, then raises the signal again to the
        # handler it found: this one, so a stop asked for is a clean exit (0), after
        # the embedded store has closed, as `slotward serve` exits.
        found = {sig: signal.signal(sig, _stopped) for sig in _STOPS}
        try:
            await uvicorn.Server(settings).serve(sockets=[sock])
        finally:
            for sig, handler in found.items():
                signal.signal(sig, handler)
    finally:
        sock.close()


def _stopped(sig: int, frame: FrameType | None) -> None:
    """The stop was served already (uvicorn shut down): nothing is left to do."""
