"""The registry's tools (engine/tools.py) as each model API takes them: ``GET /v1/tools``.

Every format carries the same name, description and JSON Schema of a tool's
arguments (:attr:`Tool.parameters`): an object schema with its properties,
its required members and ``additionalProperties: false``, no ``$ref`` and no
top-level ``anyOf``/``oneOf`` (OpenAI refuses those in ``parameters``; both
OpenAI and Anthropic take the rest of JSON Schema 2020-12 as given). Only the
canonical argument names are published: a model told one name for a thing
uses it; the aliases (``start_time``) are still accepted when sent.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Literal

from slotward.engine.errors import ValidationFailed
from slotward.engine.tools import TOOLS, Tool

__all__ = ["DEFAULT_FORMAT", "FORMATS", "Format", "check_format", "tool_schemas"]

Format = Literal["openai", "anthropic", "mcp"]
FORMATS: tuple[Format, ...] = ("openai", "anthropic", "mcp")
DEFAULT_FORMAT: Format = "openai"
"""Without ``?format``: OpenAI's, the shape most agent frameworks take."""


def _openai(tool: Tool) -> dict[str, Any]:
    function = {"name": tool.name, "description": tool.description, "parameters": tool.parameters}
    return {"type": "function", "function": function}


def _anthropic(tool: Tool) -> dict[str, Any]:
    return {"name": tool.name, "description": tool.description, "input_schema": tool.parameters}


def _mcp(tool: Tool) -> dict[str, Any]:
    return {
        "name": tool.name,
        "description": tool.description,
        "inputSchema": tool.parameters,
        "annotations": tool.annotations(),
    }


_BY_FORMAT: dict[Format, Callable[[Tool], dict[str, Any]]] = {
    "openai": _openai,
    "anthropic": _anthropic,
    "mcp": _mcp,
}


def tool_schemas(format: Format = DEFAULT_FORMAT, tools: Sequence[Tool] = TOOLS) -> list[Any]:
    """The tools in ``format``, in the registry's order, ready to register with a model."""
    return [_BY_FORMAT[format](tool) for tool in tools]


def check_format(value: str | None) -> Format:
    """The ``format`` query parameter (absent: :data:`DEFAULT_FORMAT`)."""
    if value is None:
        return DEFAULT_FORMAT
    for known in FORMATS:
        if value == known:
            return known
    raise ValidationFailed(
        f"format must be one of {', '.join(FORMATS)}, got {value[:40]!r}",
        code="invalid_field",
        extra={"field": "format"},
    )
