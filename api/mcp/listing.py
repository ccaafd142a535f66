"""How each tool of the registry is listed over MCP: the ``tools/list`` entries.

The documents are built once, in api/tool_formats.py (``GET /v1/tools?format=mcp``
answers the very same): a tool's canonical arguments (``Tool.parameters``) plus
``workflow_id`` and ``step`` where it is keyed by its workflow, its output
schema made self-contained, its ToolAnnotations hints (``Tool.annotations()``)
and its description. This module only wraps them in the mcp package's types.
"""

from __future__ import annotations

from mcp.types import Tool as McpTool
from mcp.types import ToolAnnotations

from slotward.api.tool_formats import SESSION_FIELDS, mcp_tool_document
from slotward.engine.tools import Tool

__all__ = ["SESSION_FIELDS", "mcp_tool"]


def mcp_tool(tool: Tool) -> McpTool:
    """The tool as ``tools/list`` announces it."""
    document = mcp_tool_document(tool)
    hints = document["annotations"]
    return McpTool(
        name=document["name"],
        description=document["description"],
        input_schema=document["inputSchema"],
        output_schema=document["outputSchema"],
        annotations=ToolAnnotations(
            read_only_hint=hints["readOnlyHint"],
            destructive_hint=hints["destructiveHint"],
            idempotent_hint=hints["idempotentHint"],
            open_world_hint=hints["openWorldHint"],
        ),
    )
