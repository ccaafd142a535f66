"""How each tool of the registry is listed over MCP: schemas and annotations.

Everything is generated from engine/tools.py: a tool's arguments
(``Tool.arguments``), its ToolAnnotations hints (``Tool.annotations()``) and
its description. The output schema is the shape its own endpoint answers
(api/http/schemas.py), made self-contained: MCP clients resolve ``$ref`` only
within the schema itself. ``GET /v1/tools?format=mcp`` lists the same tools;
:func:`mcp_tool` is the one place this module builds one, so the two can share it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcp.types import Tool as McpTool
from mcp.types import ToolAnnotations

from slotward.api.http import schemas
from slotward.engine.rules.shapes import Shape, collect_components
from slotward.engine.tools import COMMIT_HOLD, CREATE_HOLD, FIND_FREE_SLOTS, RELEASE_HOLD, Tool

__all__ = ["OUTPUTS", "SESSION_FIELDS", "input_schema", "mcp_tool", "output_schema"]

# What each tool answers on success; tests/unit/test_mcp_listing.py checks it
# covers the registry.
OUTPUTS: Mapping[str, Shape] = {
    CREATE_HOLD.name: schemas.HOLD,
    COMMIT_HOLD.name: schemas.HOLD,
    RELEASE_HOLD.name: schemas.HOLD,
    FIND_FREE_SLOTS.name: schemas.AVAILABILITY,
}

# The envelope's members a tool keyed by its workflow takes beside its arguments.
SESSION_FIELDS = ("workflow_id", "step")
_SESSION_SCHEMA: dict[str, Any] = {
    "workflow_id": {
        "type": "string",
        "minLength": 1,
        "maxLength": 255,
        "description": (
            "The workflow (task, conversation) this call belongs to. Optional: without it "
            "the call belongs to this MCP session's workflow, so a retry in the session "
            "lands once. Give the same value to keep one workflow across sessions."
        ),
    },
    "step": {
        "type": ["integer", "null"],
        "minimum": 0,
        "description": (
            "The step within the workflow. The same step, attendees and times land once; "
            "to book the same slot again on purpose, use a new step."
        ),
    },
}
_REF_PREFIX = "#/components/schemas/"


def input_schema(tool: Tool) -> dict[str, Any]:
    """The tool's arguments, plus the workflow members where the tool is keyed by them."""
    schema = tool.arguments.json_schema()
    if tool.needs_workflow:
        schema["properties"] = {**schema["properties"], **_SESSION_SCHEMA}
    return schema


def output_schema(tool: Tool) -> dict[str, Any]:
    """The document the tool answers on success, with its nested shapes under ``$defs``."""
    shape = OUTPUTS[tool.name]
    schema = shape.json_schema()
    nested = {n: s for n, s in collect_components([shape]).items() if n != shape.name}
    if nested:
        schema["$defs"] = nested
    local: dict[str, Any] = _local_refs(schema)
    return local


def _local_refs(node: Any) -> Any:
    if isinstance(node, dict):
        ref = node.get("$ref")
        if isinstance(ref, str) and ref.startswith(_REF_PREFIX):
            return {**node, "$ref": "#/$defs/" + ref.removeprefix(_REF_PREFIX)}
        return {k: _local_refs(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_local_refs(v) for v in node]
    return node


def mcp_tool(tool: Tool) -> McpTool:
    """The tool as ``tools/list`` announces it."""
    hints = tool.annotations()
    return McpTool(
        name=tool.name,
        description=tool.description,
        input_schema=input_schema(tool),
        output_schema=output_schema(tool),
        annotations=ToolAnnotations(
            read_only_hint=hints["readOnlyHint"],
            destructive_hint=hints["destructiveHint"],
            idempotent_hint=hints["idempotentHint"],
            open_world_hint=hints["openWorldHint"],
        ),
    )
