"""The MCP listing is generated from the registry, and its schemas stand alone."""

from __future__ import annotations

import json
import re
from pathlib import Path

# The validator the mcp client checks structured content with (an mcp dependency,
# shipped without type stubs).
import jsonschema  # type: ignore[import-untyped]
import pytest

from slotward.api.mcp.listing import mcp_tool
from slotward.api.tool_formats import OUTPUTS, mcp_input_schema, output_schema, tool_schemas
from slotward.engine.tools import FIND_FREE_SLOTS, TOOLS, Tool


def test_every_tool_has_an_output_shape() -> None:
    assert sorted(OUTPUTS) == sorted(tool.name for tool in TOOLS)


@pytest.mark.parametrize("tool", TOOLS, ids=lambda t: t.name)
def test_the_schemas_are_valid_and_self_contained(tool: Tool) -> None:
    for schema in (mcp_input_schema(tool), output_schema(tool)):
        jsonschema.Draft202012Validator.check_schema(schema)
        assert "#/components/" not in json.dumps(schema)  # MCP clients resolve within it


@pytest.mark.parametrize("tool", TOOLS, ids=lambda t: t.name)
def test_a_tool_keyed_by_its_workflow_takes_the_workflow(tool: Tool) -> None:
    properties = mcp_input_schema(tool)["properties"]
    assert ("workflow_id" in properties) is tool.needs_workflow
    assert ("step" in properties) is tool.needs_workflow
    assert set(tool.parameters["properties"]) <= set(properties)


def test_get_v1_tools_in_mcp_format_is_what_slotward_mcp_announces() -> None:
    announced = [mcp_tool(tool).model_dump(by_alias=True, exclude_none=True) for tool in TOOLS]
    listed = tool_schemas("mcp")
    assert [(t["name"], t["inputSchema"], t["outputSchema"]) for t in announced] == [
        (t["name"], t["inputSchema"], t["outputSchema"]) for t in listed
    ]


@pytest.mark.parametrize("tool", TOOLS, ids=lambda t: t.name)
def test_the_annotations_are_the_registry_flags(tool: Tool) -> None:
    listed = mcp_tool(tool)
    assert listed.annotations is not None
    assert listed.annotations.model_dump(by_alias=True, exclude_none=True) == tool.annotations()
    assert listed.description == tool.description


def test_the_availability_schema_resolves_its_nested_shapes() -> None:
    document = {
        "attendees": ["att_1"], "from": "2030-10-14T13:00:00Z", "to": "2030-10-14T16:00:00Z",
        "busy": [{"attendee": "att_1", "start": "2030-10-14T14:00:00Z",
                  "end": "2030-10-14T14:30:00Z", "kind": "held"}],
        "free": [{"start": "2030-10-14T13:00:00Z", "end": "2030-10-14T14:00:00Z"}],
    }  # fmt: skip
    validator = jsonschema.Draft202012Validator(output_schema(FIND_FREE_SLOTS))
    assert list(validator.iter_errors(document)) == []
    document["busy"][0]["colour"] = "red"  # type: ignore[index]
    assert list(validator.iter_errors(document)) != []  # the nested shape is checked


def test_docs_mcp_lists_every_tool_with_its_annotations() -> None:
    """docs/mcp.md's table of tools stays the registry's."""
    text = (Path(__file__).parents[2] / "docs" / "mcp.md").read_text()
    rows = dict(re.findall(r"^\| `(\w+)` \| ([^|]+) \|", text, re.M))
    assert sorted(rows) == sorted(tool.name for tool in TOOLS)
    for tool in TOOLS:
        hints = {h.strip() for h in rows[tool.name].split(",")}
        assert ("readOnly" in hints) is tool.read_only, tool.name
        assert ("destructive" in hints) is tool.destructive, tool.name
        assert ("idempotent" in hints) is tool.idempotent, tool.name
