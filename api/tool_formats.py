"""The registry's tools (engine/tools.py) as each model API takes them: ``GET /v1/tools``.

Every format carries the same name, description and JSON Schema of a tool's
arguments (:attr:`Tool.parameters`): an object schema with its properties,
its required members and ``additionalProperties: false``, no ``$ref`` and no
top-level ``anyOf``/``oneOf`` (OpenAI refuses those in ``parameters``; both
OpenAI and Anthropic take the rest of JSON Schema 2020-12 as given). Only the
canonical argument names are published: a model told one name for a thing
uses it; the aliases (``start_time``) are still accepted when sent.

The MCP format is exactly what ``slotward mcp`` announces in ``tools/list``
(api/mcp/listing.py wraps these documents): the tools keyed by a workflow take
``workflow_id`` and ``step`` as arguments there (an MCP call has no envelope to
carry them), and each tool has its ``outputSchema``, the document its own
endpoint answers, made self-contained (MCP clients resolve ``$ref`` only
within the schema itself).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal, TypeVar

from slotward.api.http import approval_schemas, schemas
from slotward.engine.errors import ValidationFailed
from slotward.engine.rules.shapes import Field, Shape, collect_components
from slotward.engine.tools import (
    COMMIT_HOLD,
    CREATE_HOLD,
    FIND_FREE_SLOTS,
    RELEASE_HOLD,
    TOOLS,
    Tool,
)

__all__ = [
    "DEFAULT_FORMAT",
    "FORMATS",
    "OTHER_OUTPUTS",
    "OUTPUTS",
    "SESSION_FIELDS",
    "Format",
    "check_format",
    "mcp_input_schema",
    "mcp_tool_document",
    "one_of",
    "output_schema",
    "tool_schemas",
]

Format = Literal["openai", "anthropic", "mcp"]
FORMATS: tuple[Format, ...] = ("openai", "anthropic", "mcp")
DEFAULT_FORMAT: Format = "openai"
"""Without ``?format``: OpenAI's, the shape most agent frameworks take."""


def _openai(tool: Tool) -> dict[str, Any]:
    function = {"name": tool.name, "description": tool.description, "parameters": tool.parameters}
    return {"type": "function", "function": function}


def _anthropic(tool: Tool) -> dict[str, Any]:
    return {"name": tool.name, "description": tool.description, "input_schema": tool.parameters}


# What each tool answers on success; tests/unit/test_mcp_listing.py checks it
# covers the registry.
OUTPUTS: Mapping[str, Shape] = {
    CREATE_HOLD.name: schemas.HOLD,
    COMMIT_HOLD.name: schemas.HOLD,
    RELEASE_HOLD.name: schemas.HOLD,
    FIND_FREE_SLOTS.name: schemas.AVAILABILITY,
}

# A commit a person must approve first answers this instead (202,
# docs/approvals.md), no error either: over MCP with ``next``, what the model
# does meanwhile (api/mcp/results.py). MCP clients check a result against the
# output schema, so the tool's schema admits both answers.
_AWAITING = Shape(
    "ApprovalRequiredResult",
    (
        *approval_schemas.APPROVAL_REQUIRED.fields,
        Field("next", "string", description="What to do meanwhile (over MCP)"),
    ),
    description=approval_schemas.APPROVAL_REQUIRED.description,
)
OTHER_OUTPUTS: Mapping[str, tuple[Shape, ...]] = {COMMIT_HOLD.name: (_AWAITING,)}

# The envelope's members a tool keyed by its workflow takes as arguments over MCP.
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
            "The step within the workflow. The same attendees and times land once while "
            "the workflow's hold of them is live or committed, whatever the step; to book "
            "the same slot again after its hold was released or expired, use a new step."
        ),
    },
}
_REF_PREFIX = "#/components/schemas/"


def mcp_input_schema(tool: Tool) -> dict[str, Any]:
    """The tool's arguments, plus the workflow members where the tool is keyed by them."""
    schema = dict(tool.parameters)  # a copy: the registry's schema is cached
    if tool.needs_workflow:
        schema["properties"] = {**schema["properties"], **_SESSION_SCHEMA}
    return schema


def output_schema(tool: Tool) -> dict[str, Any]:
    """The document the tool answers on success, with its nested shapes under ``$defs``;
    ``anyOf`` them where it has other answers (an object at the root, as MCP wants)."""
    shape, *others = (OUTPUTS[tool.name], *OTHER_OUTPUTS.get(tool.name, ()))
    if others:
        schema: dict[str, Any] = {
            "type": "object",
            "anyOf": [{"$ref": _REF_PREFIX + s.name} for s in (shape, *others)],
        }
        nested = collect_components([shape, *others])
    else:
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


def mcp_tool_document(tool: Tool) -> dict[str, Any]:
    """The tool as ``slotward mcp`` announces it in ``tools/list``."""
    return {
        "name": tool.name,
        "description": tool.description,
        "inputSchema": mcp_input_schema(tool),
        "outputSchema": output_schema(tool),
        "annotations": tool.annotations(),
    }


_BY_FORMAT: dict[Format, Callable[[Tool], dict[str, Any]]] = {
    "openai": _openai,
    "anthropic": _anthropic,
    "mcp": mcp_tool_document,
}


def tool_schemas(format: Format = DEFAULT_FORMAT, tools: Sequence[Tool] = TOOLS) -> list[Any]:
    """The tools in ``format``, in the registry's order, ready to register with a model."""
    return [_BY_FORMAT[format](tool) for tool in tools]


Choice = TypeVar("Choice", bound=str)


def one_of(value: str, choices: Sequence[Choice], field: str) -> Choice:
    """``value`` as one of ``choices`` (a query parameter's), or 422 naming ``field``."""
    for known in choices:
        if value == known:
            return known
    raise ValidationFailed(
        f"{field} must be one of {', '.join(choices)}, got {value[:40]!r}",
        code="invalid_field",
        extra={"field": field},
    )


def check_format(value: str | None) -> Format:
    """The ``format`` query parameter (absent: :data:`DEFAULT_FORMAT`)."""
    return DEFAULT_FORMAT if value is None else one_of(value, FORMATS, "format")
