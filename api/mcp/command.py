"""``slotward mcp``'s arguments, apart from what runs it (api/mcp/cli.py).

Every ``slotward`` command builds its parser, so this module imports nothing
heavy: the ``mcp`` package (pydantic's models) costs about a second of CPU to
import, which ``slotward serve`` and ``keys`` would otherwise pay at every start.
"""

from __future__ import annotations

import argparse

__all__ = ["KEY_VARIABLE", "add_mcp_parser"]

KEY_VARIABLE = "SLOTWARD_API_KEY"
_STDIO, _HTTP = "stdio", "streamable-http"


def add_mcp_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    mcp = sub.add_parser(
        "mcp", help="serve the tools over MCP (stdio, or streamable HTTP); docs/mcp.md"
    )
    mcp.add_argument(
        "--transport", choices=(_STDIO, _HTTP), default=_STDIO,
        help="stdio (default): the MCP client starts this command; "
        "streamable-http: serve http://HOST:PORT/mcp",
    )  # fmt: skip
    mcp.add_argument("--host", default="127.0.0.1", help="streamable HTTP: the address")
    mcp.add_argument("--port", type=int, default=8765, help="streamable HTTP: the port (0: any)")
    where = mcp.add_mutually_exclusive_group()
    where.add_argument(
        "--db", dest="mcp_db", metavar="URL",
        help="run the tools in this process on this database (default: the global --db)",
    )  # fmt: skip
    where.add_argument("--url", help="send the tools to the slotward server at this URL")
    mcp.add_argument(
        "--key",
        help=f"the API key the calls are made with (default: ${KEY_VARIABLE}, which other "
        "users cannot read in the process list)",
    )
    mcp.add_argument(
        "--workflow", help="the workflow of every call that gives none (default: one per session)"
    )
