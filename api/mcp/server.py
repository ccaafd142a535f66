"""The MCP server: the registry's tools, each call run by a backend.

:class:`SlotwardMCP` is an ``MCPServer`` (mcp 2.x) whose ``tools/list`` and
``tools/call`` come from engine/tools.py rather than from Python signatures:
the schemas are the registry's (listing.py), and a call becomes the generic
envelope ``{"tool", "arguments", "workflow_id", "step"}`` that
``POST /v1/tool-calls`` takes, run in this process (embedded.py) or by a server
(remote.py). Every answer is a tool result (results.py); nothing raises to the
SDK, whose own error text would reach the model.

The caller's identity is an API key: the one the server started with
(``--key``), or over streamable HTTP the request's own
``Authorization: Bearer`` key, which wins, so several users may share one
server, each with their own key.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Protocol

from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CallToolResult, InputRequiredResult
from mcp.types import Tool as McpTool

from slotward.api.mcp.listing import SESSION_FIELDS, mcp_tool
from slotward.api.mcp.results import Answer, problem_answer, tool_result
from slotward.api.mcp.workflows import SessionWorkflows
from slotward.engine.errors import SlotwardError
from slotward.engine.tools import TOOLS, tool_named

__all__ = ["INSTRUCTIONS", "Backend", "SlotwardMCP"]

log = logging.getLogger("slotward.mcp")

INSTRUCTIONS = (
    "slotward books calendar slots for agents without double bookings. Find a slot with the "
    "read-only tool, hold it, then commit it (or release it when the plan changes). Every call "
    "is safe to retry: the same call lands once and answers as the first did. A tool error "
    "carries `code`, `detail`, `retryable` and `next`, what to do about it; a slot conflict "
    "carries `alternatives`. A commit may need a person's approval first: it then answers "
    "`outcome: approval_required` (no error) with the `approval`, and its `next` says what to "
    "do: tell the user, and commit again later."
)


class Backend(Protocol):
    """Runs one generic envelope for the caller whose API key is ``key``."""

    async def call(self, envelope: Mapping[str, Any], key: str | None) -> Answer: ...


class SlotwardMCP(MCPServer[Any]):
    def __init__(self, backend: Backend, workflows: SessionWorkflows, *, key: str | None) -> None:
        super().__init__("slotward", instructions=INSTRUCTIONS)
        self._backend = backend
        self._workflows = workflows
        self._key = key

    def __repr__(self) -> str:
        return f"SlotwardMCP({self._backend!r})"  # the key stays out

    async def list_tools(self) -> list[McpTool]:
        return [mcp_tool(tool) for tool in TOOLS]

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        headers = _headers(context)
        try:
            envelope = self._envelope(name, arguments, headers)
        except SlotwardError as error:
            return tool_result(problem_answer(error))
        return tool_result(await self._backend.call(envelope, _caller_key(headers, self._key)))

    def _envelope(
        self, name: str, arguments: dict[str, Any], headers: Mapping[str, str] | None
    ) -> dict[str, Any]:
        tool = tool_named(name)
        if not tool.needs_workflow:
            return {"tool": tool.name, "arguments": arguments}
        given = {k: v for k, v in arguments.items() if k not in SESSION_FIELDS}
        envelope: dict[str, Any] = {"tool": tool.name, "arguments": given}
        envelope["workflow_id"] = self._workflows.of(arguments, headers)
        if "step" in arguments:
            envelope["step"] = arguments["step"]
        return envelope


def _headers(context: Context[Any, Any] | None) -> Mapping[str, str] | None:
    """The HTTP request's headers over streamable HTTP; None over stdio."""
    if context is None:
        return None
    try:
        return context.headers
    except ValueError:  # a context outside any request
        return None


def _caller_key(headers: Mapping[str, str] | None, default: str | None) -> str | None:
    """The request's bearer key; the server's own where the request sends no Authorization.

    An Authorization that is not a bearer key is no key (the call is refused
    ``missing_api_key``), never the server's: it was not meant as that caller.
    """
    header = (headers or {}).get("authorization")
    if header is None:
        return default
    scheme, _, secret = header.partition(" ")
    return secret.strip() or None if scheme.lower() == "bearer" else None
