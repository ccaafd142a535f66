"""Real MCP sessions with slotward: `slotward mcp` spawned over stdio, or served over
streamable HTTP, and the same package's client (mcp.ClientSession)."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx2
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.types import CallToolResult

from tests.e2e.test_cli import SLOTWARD, _run

__all__ = ["agent_key", "http_session", "mcp_http", "stdio_session", "structured"]


def agent_key(db: Path, agent: str, *, role: str = "agent", priority: int = 50) -> str:
    """A key made as a user makes one: `slotward keys create` (its last line)."""
    made = _run(
        db, "keys", "create", "--tenant", "acme", "--agent", agent, "--role", role,
        "--priority", str(priority),
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    return made.stdout.strip().splitlines()[-1]


def _env(extra: dict[str, str]) -> dict[str, str]:
    # The client passes only a few variables on (as an MCP host does): say the rest.
    keep = {k: v for k, v in os.environ.items() if k.startswith("SLOTWARD_") or k == "PYTHONPATH"}
    return {**keep, "SLOTWARD_LOG_FORMAT": "text", **extra}


@contextlib.asynccontextmanager
async def stdio_session(
    args: list[str], errlog: Path, env: dict[str, str] | None = None
) -> AsyncIterator[ClientSession]:
    """`slotward <args>` spawned by the MCP client, its stderr kept in ``errlog``."""
    params = StdioServerParameters(
        command=SLOTWARD[0], args=[*SLOTWARD[1:], *args], env=_env(env or {}), cwd=os.getcwd()
    )
    with errlog.open("a") as errors:
        async with (
            stdio_client(params, errlog=errors) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()
            yield session


@contextlib.contextmanager
def mcp_http(args: list[str], errlog: Path, env: dict[str, str] | None = None) -> Iterator[str]:
    """`slotward <args> --transport streamable-http --port 0`, until the block ends; its URL."""
    argv = [*SLOTWARD, *args, "--transport", "streamable-http", "--port", "0"]
    with errlog.open("a") as errors:
        proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=errors, text=True,
            env={**os.environ, **_env(env or {})},
        )  # fmt: skip
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            assert line.startswith("slotward mcp serving "), errlog.read_text()
            yield line.split()[-1]
        finally:
            proc.terminate()
            assert proc.wait(timeout=30) == 0
            if proc.stdout:
                proc.stdout.close()


@contextlib.asynccontextmanager
async def http_session(
    url: str, key: str | None = None, *, authorization: str | None = None
) -> AsyncIterator[ClientSession]:
    """An MCP session over streamable HTTP, sending ``key`` as its bearer when given
    (or ``authorization`` as the header whole)."""
    if key is not None:
        authorization = f"Bearer {key}"
    headers = {"Authorization": authorization} if authorization is not None else {}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


def structured(result: CallToolResult) -> dict[str, Any]:
    """The structured content, checked to say what the text content says."""
    assert result.structured_content is not None
    text = result.content[0]
    assert text.type == "text"
    document: dict[str, Any] = result.structured_content
    assert json.loads(text.text.splitlines()[-1]) == document
    return document
