"""The tool registry (engine/tools.py) is the one place a tool is named.

Routes, the ``/v1/tool-calls`` envelope, its dispatch and the OpenAPI document
are generated from it; a ratchet fails if a tool's name is written as a string
anywhere else in the shipped package, so a fifth tool cannot be half-added.
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from slotward.api import service, tool_formats
from slotward.api.http import schemas
from slotward.api.http.openapi import build_openapi
from slotward.api.http.table import ROUTES
from slotward.engine import tools
from slotward.engine.errors import ValidationFailed
from slotward.engine.usecases import lifecycle, placing

ROOT = Path(__file__).resolve().parent.parent
PACKAGED = ("engine", "adapters", "api", "testing", "benchmarks")
REGISTRY = ROOT / "engine" / "tools.py"


def _docstrings(tree: ast.AST) -> set[int]:
    """The ids of the docstring constants: prose may name a tool."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def named_tools(source: str) -> list[tuple[int, str]]:
    """(line, tool) for every string literal, docstrings aside, that holds a tool's name."""
    tree = ast.parse(source)
    prose = _docstrings(tree)
    return [
        (node.lineno, name)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in prose
        for name in tools.NAMES
        if name in node.value
    ]


def test_no_tool_is_named_outside_the_registry() -> None:
    found = {
        str(path.relative_to(ROOT)): bad
        for folder in PACKAGED
        for path in sorted((ROOT / folder).rglob("*.py"))
        if path != REGISTRY and (bad := named_tools(path.read_text()))
    }
    assert not found, f"tool names written outside engine/tools.py: {found}"


def test_the_ratchet_catches_a_planted_name() -> None:
    planted = (
        '"""The find_free_slots module: prose may name it."""\n'
        "def f(tool):\n"
        '    """Docstrings too: create_calendar_hold."""\n'
        '    if tool == "commit_calendar_hold":\n'
        '        return f"run {tool} as release_calendar_hold"\n'
    )
    assert named_tools(planted) == [(4, "commit_calendar_hold"), (5, "release_calendar_hold")]
    assert named_tools("x = TOOLS[0].name\n") == []


def test_the_registry_holds_the_four_tools_with_their_mcp_hints() -> None:
    hints = {t.name: t.annotations() for t in tools.TOOLS}
    assert list(hints) == [
        "create_calendar_hold",
        "commit_calendar_hold",
        "release_calendar_hold",
        "find_free_slots",
    ]
    flags = {t.name: (t.read_only, t.idempotent, t.destructive) for t in tools.TOOLS}
    assert flags == {
        "create_calendar_hold": (False, True, False),
        "commit_calendar_hold": (False, True, False),
        "release_calendar_hold": (False, True, True),
        "find_free_slots": (True, True, False),
    }
    assert hints["release_calendar_hold"] == {
        "readOnlyHint": False,
        "destructiveHint": True,
        "idempotentHint": True,
        "openWorldHint": False,
    }


@pytest.mark.parametrize("tool", tools.TOOLS, ids=lambda t: t.name)
def test_every_tool_carries_what_mcp_needs(tool: tools.Tool) -> None:
    # An LLM is told what a retry does; the schema is JSON Schema; the use case exists.
    assert "retry" in tool.description.lower()
    schema = tool.arguments.json_schema()
    assert (schema["type"], schema["additionalProperties"]) == ("object", False)
    names = set(schema["properties"])
    assert set(tool.identity) <= names
    assert {alias for alias, _ in tool.aliases} <= names
    module, _, function = tool.usecase.rpartition(".")
    assert callable(getattr(importlib.import_module(module), function))


def test_the_use_cases_record_the_registry_names() -> None:
    recorded = (placing.TOOL, lifecycle.COMMIT_TOOL, lifecycle.RELEASE_TOOL)
    assert recorded == tuple(
        t.name for t in (tools.CREATE_HOLD, tools.COMMIT_HOLD, tools.RELEASE_HOLD)
    )


def _keys(schema: object) -> Iterator[str]:
    """Every member name at any depth of a JSON Schema."""
    if isinstance(schema, dict):
        for key, value in schema.items():
            yield key
            yield from _keys(value)
    elif isinstance(schema, list):
        for item in schema:
            yield from _keys(item)


@pytest.mark.parametrize("tool", tools.TOOLS, ids=lambda t: t.name)
def test_what_a_model_is_given_is_plain_json_schema(tool: tools.Tool) -> None:
    # OpenAI refuses $ref and a top-level anyOf/oneOf in a function's parameters;
    # Anthropic wants an object schema. The canonical names only, every one explained.
    schema = tool.parameters
    assert (schema["type"], schema["additionalProperties"]) == ("object", False)
    assert not {"$ref", "$defs", "oneOf", "allOf", "not"} & set(_keys(schema))
    assert "anyOf" not in schema
    assert list(schema["properties"]) == [f.name for f in tool.fields]
    assert schema.get("required", []) == [f.name for f in tool.fields if f.required]
    assert not {alias for alias, _ in tool.aliases} & set(schema["properties"])
    undescribed = [n for n, p in schema["properties"].items() if not p.get("description")]
    assert not undescribed, f"{tool.name}: no description for {undescribed}"
    assert "safe" in tool.description or tool.read_only


def test_the_create_description_says_what_to_do_with_a_conflict() -> None:
    text = tools.CREATE_HOLD.description
    for words in ("slot_conflict", "alternatives", "new step", "lands once",
                  f"call {tools.CREATE_HOLD.name} again"):  # fmt: skip
        assert words in text, words
    assert tools.FIND_FREE_SLOTS.name in text
    assert tools.COMMIT_HOLD.name in text
    assert tools.RELEASE_HOLD.name in text


@pytest.mark.parametrize("fmt", tool_formats.FORMATS)
def test_every_format_lists_the_registry_in_order(fmt: tool_formats.Format) -> None:
    listed = tool_formats.tool_schemas(fmt)
    if fmt == "openai":
        assert all(t["type"] == "function" for t in listed)
        flat = [(t["function"]["name"], t["function"]["parameters"]) for t in listed]
    elif fmt == "anthropic":
        assert all(set(t) == {"name", "description", "input_schema"} for t in listed)
        flat = [(t["name"], t["input_schema"]) for t in listed]
    else:
        assert [t["annotations"] for t in listed] == [t.annotations() for t in tools.TOOLS]
        # Over MCP a call has no envelope: the workflow's members are arguments.
        flat = [(t["name"], t["inputSchema"]) for t in listed]
        for (_, schema), tool in zip(flat, tools.TOOLS, strict=True):
            extra = set(schema["properties"]) - set(tool.parameters["properties"])
            assert extra == (set(tool_formats.SESSION_FIELDS) if tool.needs_workflow else set())
            for name in extra:
                del schema["properties"][name]
    assert flat == [(t.name, t.parameters) for t in tools.TOOLS]


def test_an_unknown_format_or_reply_is_refused() -> None:
    assert tool_formats.check_format(None) == tool_formats.DEFAULT_FORMAT
    with pytest.raises(ValidationFailed) as caught:
        tool_formats.check_format("gemini")
    assert caught.value.extra == {"field": "format"}


def test_every_tool_is_served_by_the_envelope() -> None:
    enum = next(f.enum for f in schemas.TOOL_CALL.fields if f.name == "tool")
    assert enum == tools.NAMES
    assert set(service.RUNNERS) == set(tools.NAMES)


def test_every_tool_is_listed_in_the_openapi_document() -> None:
    spec = build_openapi(ROUTES)
    tool = spec["components"]["schemas"]["ToolCall"]["properties"]["tool"]
    assert tool["enum"] == list(tools.NAMES)
    summary = spec["paths"]["/v1/holds"]["post"]["summary"]
    assert tools.CREATE_HOLD.name in summary


def test_the_tool_routes_take_the_registry_fields() -> None:
    create = schemas.HOLD_CREATE.fields
    assert [f.name for f in create[:2]] == ["workflow_id", "step"]
    assert create[2:] == tools.CREATE_HOLD.fields
    # The hold's id is in the path; the body holds the rest.
    assert schemas.COMMIT.fields == tuple(
        f for f in tools.COMMIT_HOLD.fields if f.name != "hold_id"
    )
    assert schemas.RELEASE.fields == ()
    availability = next(r for r in ROUTES if r.path == "/v1/availability")
    assert [p.name for p in availability.params] == [f.name for f in tools.FIND_FREE_SLOTS.fields]


def test_an_alias_stands_in_for_its_field() -> None:
    args = tools.CREATE_HOLD.arguments
    by_name = {f.name: f for f in args.fields}
    assert not by_name["start"].required
    assert by_name["start_time"].description == "Alias of start"
    given = args.validate({"attendees": ["a"], "start_time": "x", "end_time": "y"})
    assert tools.CREATE_HOLD.canonical(given) == {"attendees": ["a"], "start": "x", "end": "y"}


def test_an_unknown_name_answers_as_the_envelope_enum_does() -> None:
    with pytest.raises(ValidationFailed) as from_registry:
        tools.tool_named("book_meeting")
    with pytest.raises(ValidationFailed) as from_shape:
        schemas.TOOL_CALL.validate({"tool": "book_meeting", "arguments": {}})
    assert from_registry.value.detail == from_shape.value.detail
    assert from_registry.value.extra == from_shape.value.extra == {"field": "tool"}
    assert from_registry.value.code == from_shape.value.code == "invalid_field"
