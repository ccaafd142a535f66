"""Shapes: validation of request bodies and JSON Schema generation (engine/rules/shapes.py)."""

from __future__ import annotations

from typing import Any

import pytest

from slotward.api.http.schemas import PROBLEM as problem_shape
from slotward.api.http.statuses import status_of
from slotward.engine.errors import ValidationFailed
from slotward.engine.rules.shapes import Field, Shape, collect_components

slot = Shape(
    "Slot",
    (
        Field("start", "string", required=True, pattern=r"^\d{4}-"),
        Field("end", "string", required=True),
    ),
)
arguments = Shape(
    "HoldArguments",
    (
        Field("start", "string", required=True, min_length=1),
        Field("duration_minutes", "integer", minimum=1, maximum=1440),
        Field("attendees", "array", items=Field("", "string", min_length=3), max_items=3),
        Field("slots", "array", items=slot),
    ),
)
tool_call = Shape(
    "ToolCall",
    (
        Field("workflow_id", "string", required=True, min_length=1, max_length=10),
        Field("step", "integer", required=True, minimum=0),
        Field("tool", "string", required=True, enum=("create_calendar_hold", "find_free_slots")),
        Field("arguments", "object", required=True, shape=arguments),
        Field("note", "string", nullable=True),
        Field("weight", "number", minimum=0),
        Field("dry_run", "boolean"),
        Field("meta", "object"),
    ),
    description="A tool call as an LLM emits it.",
)


def _body(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "workflow_id": "wf-42",
        "step": 3,
        "tool": "create_calendar_hold",
        "arguments": {"start": "2030-10-14T14:00:00Z"},
    }
    body.update(changes)
    return body


def _error(data: object, **kwargs: Any) -> ValidationFailed:
    with pytest.raises(ValidationFailed) as info:
        tool_call.validate(data, **kwargs)
    return info.value


# -- accepted -------------------------------------------------------------------


def test_valid_body_returns_a_new_dict_with_present_keys_only() -> None:
    body = _body(note=None, weight=0.5, dry_run=False, meta={"any": ["thing"]})
    result = tool_call.validate(body)
    assert result == body
    assert result is not body
    assert "note" in result
    assert "weight" not in tool_call.validate(_body())


def test_nested_results_are_copies() -> None:
    body = _body(meta={"a": 1})
    result = tool_call.validate(body)
    result["arguments"]["start"] = "changed"
    result["meta"]["a"] = 2
    assert body["arguments"]["start"] == "2030-10-14T14:00:00Z"
    assert body["meta"] == {"a": 1}


def test_number_accepts_int_and_float() -> None:
    assert tool_call.validate(_body(weight=2))["weight"] == 2
    assert tool_call.validate(_body(weight=2.5))["weight"] == 2.5


def test_ignored_keys_are_dropped_silently() -> None:
    result = tool_call.validate(_body(agent_thought="book it"), ignore={"agent_thought"})
    assert "agent_thought" not in result
    assert result == _body()


def test_ignore_applies_to_the_top_level_only() -> None:
    body = _body(arguments={"start": "x", "agent_thought": "hm"})
    error = _error(body, ignore=("agent_thought",))
    assert error.code == "unknown_field"
    assert error.extra["field"] == "arguments.agent_thought"


def test_additional_members_pass_through_when_allowed() -> None:
    open_shape = Shape("Open", (Field("a", "integer"),), additional=True)
    assert open_shape.validate({"a": 1, "b": [2]}) == {"a": 1, "b": [2]}
    assert _code_of(open_shape, {"a": "1", "b": 2}) == "invalid_field"


def _code_of(shape: Shape, data: object) -> str:
    with pytest.raises(ValidationFailed) as info:
        shape.validate(data)
    return info.value.code


# -- body and members -----------------------------------------------------------


@pytest.mark.parametrize("data", [[], "x", 1, None, True])
def test_body_must_be_an_object(data: object) -> None:
    error = _error(data)
    assert error.code == "invalid_body"
    assert "JSON object" in error.detail
    assert status_of(error) == 422


def test_unknown_field_is_named_with_the_allowed_ones() -> None:
    error = _error(_body(stpe=3))
    assert error.code == "unknown_field"
    assert "'stpe'" in error.detail
    assert "workflow_id, step, tool, arguments" in error.detail
    assert error.extra["field"] == "stpe"
    assert "step" in error.extra["allowed"]


@pytest.mark.parametrize("name", ["workflow_id", "step", "tool", "arguments"])
def test_missing_required_field(name: str) -> None:
    body = _body()
    del body[name]
    error = _error(body)
    assert error.code == "missing_field"
    assert f"'{name}'" in error.detail
    assert error.extra == {"field": name}


def test_missing_nested_field_has_a_dotted_path() -> None:
    error = _error(_body(arguments={"duration_minutes": 30}))
    assert error.code == "missing_field"
    assert error.extra == {"field": "arguments.start"}


# -- types ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "got"),
    [(True, "boolean"), ("3", "string"), (3.0, "number"), (None, "null"), ([3], "array")],
)
def test_integer_means_int_and_not_bool(value: object, got: str) -> None:
    error = _error(_body(step=value))
    assert error.code == "invalid_field"
    assert error.detail == f"'step' must be an integer >= 0, got {got}"
    assert error.extra == {"field": "step"}


@pytest.mark.parametrize("value", [True, "1.5", None, float("nan"), float("inf")])
def test_number_refuses_bool_strings_null_and_non_finite(value: object) -> None:
    assert _error(_body(weight=value)).code == "invalid_field"


@pytest.mark.parametrize(
    ("name", "value"),
    [("workflow_id", 42), ("dry_run", 0), ("dry_run", "true"), ("meta", []), ("arguments", "x")],
)
def test_wrong_type_is_invalid(name: str, value: object) -> None:
    error = _error(_body(**{name: value}))
    assert error.code == "invalid_field"
    assert error.extra == {"field": name}


def test_null_only_where_nullable() -> None:
    assert tool_call.validate(_body(note=None))["note"] is None
    error = _error(_body(dry_run=None))
    assert error.detail == "'dry_run' must be a boolean, got null"


def test_nullable_detail_says_or_null() -> None:
    assert _error(_body(note=1)).detail == "'note' must be a string or null, got integer"


# -- constraints ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("changes", "detail"),
    [
        ({"step": -1}, "'step' must be an integer >= 0, got -1"),
        (
            {"workflow_id": ""},
            "'workflow_id' must be a string of 1 to 10 characters, got 0 characters",
        ),
        (
            {"workflow_id": "x" * 11},
            "'workflow_id' must be a string of 1 to 10 characters, got 11 characters",
        ),
        (
            {"tool": "rm_rf"},
            "'tool' must be one of 'create_calendar_hold', 'find_free_slots', got 'rm_rf'",
        ),
        ({"weight": -0.5}, "'weight' must be a number >= 0, got -0.5"),
        (
            {"arguments": {"start": "x", "duration_minutes": 0}},
            "'arguments.duration_minutes' must be an integer from 1 to 1440, got 0",
        ),
        (
            {"arguments": {"start": "x", "attendees": ["a@b.c"] * 4}},
            "'arguments.attendees' must be an array of at most 3 items, got 4 items",
        ),
        (
            {"arguments": {"start": "x", "attendees": ["a@b.c", "ab"]}},
            "'arguments.attendees[1]' must be a string of at least 3 characters, got 2 characters",
        ),
        (
            {"arguments": {"start": "x", "slots": [{"start": "2030-", "end": "y"}, {}]}},
            "missing required field 'arguments.slots[1].start'",
        ),
        (
            {"arguments": {"start": "x", "slots": [{"start": "soon", "end": "y"}]}},
            "'arguments.slots[0].start' must be a string matching /^\\d{4}-/, got 'soon'",
        ),
        (
            {"arguments": {"start": "x", "slots": ["2030"]}},
            "'arguments.slots[0]' must be an object, got string",
        ),
    ],
)
def test_constraint_details(changes: dict[str, Any], detail: str) -> None:
    assert _error(_body(**changes)).detail == detail


def test_nested_error_names_the_dotted_path() -> None:
    error = _error(_body(arguments={"start": "x", "duration_minutes": "30"}))
    assert error.code == "invalid_field"
    assert error.extra == {"field": "arguments.duration_minutes"}
    assert error.detail.startswith("'arguments.duration_minutes' must be an integer")


def test_unknown_nested_field() -> None:
    error = _error(_body(arguments={"start": "x", "end": "y"}))
    assert error.code == "unknown_field"
    assert error.extra["field"] == "arguments.end"


def test_long_values_are_abbreviated_in_details() -> None:
    assert len(_error(_body(tool="x" * 10_000)).detail) < 200


# -- declarations ---------------------------------------------------------------


def test_inconsistent_declarations_fail_early() -> None:
    with pytest.raises(ValueError, match="twice"):
        Shape("Twice", (Field("a", "string"), Field("a", "integer")))
    with pytest.raises(ValueError, match="items"):
        Field("a", "string", items=Field("", "string"))
    with pytest.raises(ValueError, match="shape"):
        Field("a", "array", shape=slot)
    with pytest.raises(ValueError, match="only for strings"):
        Field("a", "integer", enum=("1",))


# -- JSON Schema ----------------------------------------------------------------


def test_json_schema_of_a_shape() -> None:
    schema = tool_call.json_schema()
    assert schema["type"] == "object"
    assert schema["description"] == "A tool call as an LLM emits it."
    assert schema["required"] == ["workflow_id", "step", "tool", "arguments"]
    assert schema["additionalProperties"] is False
    properties = schema["properties"]
    assert properties["workflow_id"] == {"type": "string", "minLength": 1, "maxLength": 10}
    assert properties["step"] == {"type": "integer", "minimum": 0}
    assert properties["tool"]["enum"] == ["create_calendar_hold", "find_free_slots"]
    assert properties["arguments"] == {"$ref": "#/components/schemas/HoldArguments"}
    assert properties["note"] == {"type": ["string", "null"]}
    assert properties["meta"] == {"type": "object"}


def test_json_schema_of_arrays_and_nested_refs() -> None:
    properties = arguments.json_schema()["properties"]
    assert properties["attendees"] == {
        "type": "array",
        "maxItems": 3,
        "items": {"type": "string", "minLength": 3},
    }
    assert properties["slots"] == {
        "type": "array",
        "items": {"$ref": "#/components/schemas/Slot"},
    }


def test_json_schema_of_nullable_nested_enum_and_example() -> None:
    shape = Shape(
        "S",
        (
            Field("slot", "object", shape=slot, nullable=True, description="d"),
            Field("mode", "string", enum=("a",), nullable=True, example="a"),
        ),
    )
    properties = shape.json_schema()["properties"]
    assert properties["slot"] == {
        "anyOf": [{"$ref": "#/components/schemas/Slot"}, {"type": "null"}],
        "description": "d",
    }
    assert properties["mode"] == {
        "type": ["string", "null"],
        "enum": ["a", None],
        "examples": ["a"],
    }


def test_collect_components_walks_nested_shapes() -> None:
    components = collect_components([tool_call, problem_shape])
    assert list(components) == ["HoldArguments", "Problem", "Slot", "ToolCall"]
    assert components["Slot"] == slot.json_schema()


def test_collect_components_finds_shapes_inside_array_items() -> None:
    deep = Shape("Deep", (Field("x", "array", items=Field("", "array", items=slot)),))
    assert set(collect_components([deep])) == {"Deep", "Slot"}


def test_collect_components_accepts_a_shape_twice() -> None:
    again = Shape("Slot", slot.fields)
    assert set(collect_components([slot, again, arguments])) == {"Slot", "HoldArguments"}


def test_collect_components_refuses_two_shapes_with_one_name() -> None:
    other = Shape("Slot", (Field("start", "string"),))
    with pytest.raises(ValueError, match="'Slot'"):
        collect_components([arguments, other])


# -- problem+json -----------------------------------------------------------------


def test_problem_shape_validates_a_problem_with_extra_members() -> None:
    problem = {
        "type": "about:blank",
        "title": "Slot conflict",
        "status": 409,
        "detail": "overlaps hold h1",
        "code": "slot_conflict",
        "retryable": False,
        "conflicts": [{"hold_id": "h1"}],
    }
    assert problem_shape.validate(problem) == problem
    schema = problem_shape.json_schema()
    assert schema["additionalProperties"] is True
    assert set(schema["required"]) == {"title", "status", "code", "retryable"}
    assert set(schema["properties"]) == {"type", "title", "status", "detail", "code", "retryable"}
