"""The agents' envelopes (api/envelopes.py): every dialect translates to the generic
envelope the fingerprint sees, the call's id never enters it, and a broken
envelope is refused naming its field by its path in the body."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slotward.api.envelopes import Call, relocated, translate
from slotward.api.http.jsonbody import decode_json
from slotward.engine.errors import ValidationFailed
from slotward.engine.tools import COMMIT_HOLD, CREATE_HOLD, FIND_FREE_SLOTS

ARGS = {"attendees": ["alex@example.com"], "start": "2030-10-14T14:00:00Z", "duration_minutes": 30}
THOUGHTS = ("agent_thought", "reasoning")


def one(body: object) -> Call:
    envelope = translate(body, decode=decode_json, ignore=THOUGHTS)
    assert not envelope.batch
    (call,) = envelope.calls
    return call


def openai(arguments: Any, name: str = CREATE_HOLD.name, **beside: Any) -> dict[str, Any]:
    function = {"name": name, "arguments": arguments}
    return {"id": "call_1", "type": "function", "function": function, **beside}


def responses(arguments: Any, name: str = CREATE_HOLD.name, **beside: Any) -> dict[str, Any]:
    """A function_call item of OpenAI's Responses API."""
    item = {"type": "function_call", "id": "fc_1", "call_id": "call_r", "name": name}
    return {**item, "arguments": arguments, "status": "completed", **beside}


def anthropic(arguments: Any, name: str = CREATE_HOLD.name, **beside: Any) -> dict[str, Any]:
    return {"type": "tool_use", "id": "toolu_1", "name": name, "input": arguments, **beside}


def refused(body: object) -> ValidationFailed:
    with pytest.raises(ValidationFailed) as caught:
        translate(body, decode=decode_json, ignore=THOUGHTS)
    return caught.value


# -- one intent, one generic envelope -------------------------------------------------

_VALUES = st.one_of(
    st.text(max_size=20), st.integers(-(2**53) + 1, 2**53 - 1), st.booleans(), st.none()
)
_ARGUMENTS = st.dictionaries(st.text(min_size=1, max_size=12), _VALUES, max_size=6)


@settings(max_examples=200, deadline=None)
@given(arguments=_ARGUMENTS, step=st.none() | st.integers(0, 1000), spaced=st.booleans())
def test_every_dialect_gives_the_same_generic_envelope(
    arguments: dict[str, Any], step: int | None, spaced: bool
) -> None:
    beside: dict[str, Any] = {"workflow_id": "wf-1", **({"step": step} if step is not None else {})}
    text = json.dumps(arguments, indent=2 if spaced else None, sort_keys=spaced)
    generic = {"tool": CREATE_HOLD.name, "arguments": arguments, **beside}
    calls = [
        one({**generic, "id": "mine"}),
        one(openai(text, **beside)),
        one(openai(arguments, **beside)),
        one(anthropic(arguments, **beside)),
        one(responses(text, **beside)),
        *translate({**beside, "tool_calls": [openai(text)]}, decode=decode_json).calls,
        *translate({**beside, "content": [anthropic(arguments)]}, decode=decode_json).calls,
        *translate({**beside, "output": [responses(text)]}, decode=decode_json).calls,
    ]
    assert all(c.envelope == generic for c in calls)  # the id is beside it, never in it
    assert [c.call_id for c in calls] == [
        "mine", "call_1", "call_1", "toolu_1", "call_r", "call_1", "toolu_1", "call_r",
    ]  # fmt: skip


def test_free_text_beside_the_call_is_dropped() -> None:
    call = one(openai(json.dumps(ARGS), workflow_id="wf", agent_thought="booking it"))
    assert call.envelope == {"tool": CREATE_HOLD.name, "arguments": ARGS, "workflow_id": "wf"}


def test_an_empty_arguments_text_is_no_arguments() -> None:
    # OpenAI sends "" for a call the model gave no arguments; the tool then says what is missing.
    assert one(openai("", name=COMMIT_HOLD.name)).envelope == {
        "tool": COMMIT_HOLD.name,
        "arguments": {},
    }


# -- string arguments are hostile input --------------------------------------------------


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ('{"start": "a", "start": "b"}', "duplicate_key"),
        ('{"duration_minutes": NaN}', "non_finite_number"),
        ('{"duration_minutes": Infinity}', "non_finite_number"),
        ('{"duration_minutes": 9007199254740993}', "number_out_of_range"),
        ('{"start": "2030-10-14T14:00:00Z"', "invalid_json"),
        ('{"title": "\\ud800"}', "invalid_json"),
        ("\ud800", "invalid_utf8"),
        ("[" * 40 + "]" * 40, "nesting_too_deep"),
    ],
)
def test_a_text_the_body_parser_would_refuse_is_refused(text: str, reason: str) -> None:
    call = one(openai(text))
    assert call.envelope is None
    assert call.refused is not None
    assert (call.refused.code, call.refused.extra["reason"]) == ("invalid_field", reason)
    assert call.refused.extra["field"] == "function.arguments"
    assert call.refused.detail.startswith("'function.arguments' is not a valid JSON text")


@pytest.mark.parametrize("text", ["[1, 2]", '"a string"', "3", "null", "true"])
def test_arguments_that_are_not_an_object_are_refused(text: str) -> None:
    # As a JSON text and as the value itself (a bare string is read as a JSON text).
    for body in (openai(text), openai(json.loads(text))):
        call = one(body)
        assert call.refused is not None
        assert call.refused.extra["field"] == "function.arguments"
    error = one(anthropic(json.loads(text))).refused
    assert error is not None
    assert error.extra == {"field": "input"}


def test_an_unknown_tool_is_named_where_the_model_wrote_it() -> None:
    for body, field in ((openai("{}", name="book"), "function.name"),
                        (anthropic({}, name="book"), "name")):  # fmt: skip
        error = one(body).refused
        assert error is not None
        assert (error.code, error.extra) == ("invalid_field", {"field": field})
        assert error.detail.startswith(f"'{field}' must be one of")


# -- batches -----------------------------------------------------------------------------


def test_an_openai_message_runs_its_calls_in_order() -> None:
    message = {  # choices[0].message as the OpenAI SDK dumps it, and the workflow
        "role": "assistant",
        "content": None,
        "refusal": None,
        "annotations": [],
        "audio": None,
        "function_call": None,
        "workflow_id": "wf",
        "step": 2,
        "tool_calls": [
            openai(json.dumps(ARGS)),
            {**openai("{}", name="nope"), "id": "call_2"},
            {**openai({"hold_id": "h"}, name=COMMIT_HOLD.name), "id": "call_3"},
        ],
    }
    envelope = translate(message, decode=decode_json)
    assert (envelope.dialect, envelope.batch) == ("openai", True)
    assert [c.call_id for c in envelope.calls] == ["call_1", "call_2", "call_3"]
    first, second, third = envelope.calls
    assert first.envelope == {"tool": CREATE_HOLD.name, "arguments": ARGS, "workflow_id": "wf",
                              "step": 2}  # fmt: skip
    assert second.refused is not None
    assert second.refused.extra == {"field": "tool_calls[1].function.name"}
    assert third.arguments_at == "tool_calls[2].function.arguments"


def test_an_anthropic_message_skips_text_and_thinking() -> None:
    message = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude",
        "stop_reason": "tool_use",
        "stop_sequence": None,
        "usage": {"input_tokens": 1},
        "workflow_id": "wf",
        "content": [
            {"type": "thinking", "thinking": "...", "signature": "x"},
            {"type": "text", "text": "Let me book that."},
            anthropic(ARGS),
            {"type": "redacted_thinking", "data": "x"},
            {**anthropic({"attendees": ["a"]}, name=FIND_FREE_SLOTS.name), "id": "toolu_2"},
        ],
    }
    envelope = translate(message, decode=decode_json)
    assert (envelope.dialect, envelope.batch) == ("anthropic", True)
    assert [(c.call_id, c.arguments_at) for c in envelope.calls] == [
        ("toolu_1", "content[2].input"),
        ("toolu_2", "content[4].input"),
    ]


def test_a_responses_output_skips_reasoning_and_messages() -> None:
    output = [
        {"type": "reasoning", "id": "rs_1", "summary": []},
        responses(json.dumps(ARGS)),
        {"type": "message", "id": "msg_1", "role": "assistant", "content": []},
        {**responses("{", name=FIND_FREE_SLOTS.name), "call_id": "call_s"},
    ]
    envelope = translate({"workflow_id": "wf", "output": output}, decode=decode_json)
    assert (envelope.dialect, envelope.batch) == ("openai-responses", True)
    first, second = envelope.calls
    assert first.envelope == {"tool": CREATE_HOLD.name, "arguments": ARGS, "workflow_id": "wf"}
    assert (first.call_id, first.id_at) == ("call_r", "output[1].call_id")
    assert second.refused is not None
    assert second.refused.extra["field"] == "output[3].arguments"


def _calls(n: int) -> list[dict[str, Any]]:
    return [{**openai("{}"), "id": f"call_{i}"} for i in range(n)]


# The frame of an envelope is the agent framework's: broken, nothing runs.
FRAMES = [
    pytest.param([], "invalid_body", None, id="not-an-object"),
    pytest.param({"type": "function"}, "missing_field", "function", id="openai-no-function"),
    pytest.param({"type": "function", "function": {"arguments": "{}"}}, "missing_field",
                 "function.name", id="openai-no-name"),
    pytest.param({"type": "function", "function": {"name": 3, "arguments": "{}"}},
                 "invalid_field", "function.name", id="openai-name-number"),
    pytest.param({"tool": CREATE_HOLD.name, "arguments": {}, "extra": 1}, "unknown_field",
                 "extra", id="generic-extra"),
    pytest.param({"type": "function", "function": {"name": "x", "arguments": "{}", "extra": 1}},
                 "unknown_field", "function.extra", id="openai-function-extra"),
    pytest.param({"type": "tool_use", "name": "x"}, "missing_field", "input", id="anthropic-input"),
    pytest.param({"type": "image"}, "invalid_field", "type", id="unknown-type"),
    pytest.param({**openai("{}"), "step": "3"}, "invalid_step", "step", id="step-string"),
    pytest.param({**anthropic({}), "workflow_id": ""}, "invalid_field", "workflow_id",
                 id="workflow-empty"),
    pytest.param({"tool_calls": []}, "invalid_field", "tool_calls", id="no-calls"),
    pytest.param({"tool_calls": _calls(17)}, "invalid_field", "tool_calls", id="17-calls"),
    pytest.param({"tool_calls": [*_calls(2), {"type": "function", "function": {"name": "x"}}]},
                 "missing_field", "tool_calls[2].function.arguments", id="batch-no-arguments"),
    pytest.param({"tool_calls": _calls(1), "role": "user"}, "invalid_field", "role", id="role"),
    pytest.param({"content": [{"type": "text", "text": "hi"}]}, "invalid_field", "content",
                 id="anthropic-nothing-to-run"),
    pytest.param({"content": [{"type": "image"}]}, "invalid_field", "content[0].type",
                 id="anthropic-image"),
    pytest.param({"content": [{"type": "tool_use", "name": "x"}]}, "missing_field",
                 "content[0].input", id="anthropic-block-no-input"),
    pytest.param({"content": [anthropic({})] * 17}, "invalid_field", "content", id="17-uses"),
    pytest.param({"tool": CREATE_HOLD.name, "arguments": "{}"}, "invalid_field", "arguments",
                 id="generic-string-arguments"),
    pytest.param({"type": "function_call", "name": "x", "arguments": "{}"}, "missing_field",
                 "call_id", id="responses-no-call-id"),
    pytest.param({"content": [{"type": {}}]}, "invalid_field", "content[0].type",
                 id="anthropic-type-object"),
    pytest.param({"output": [{"type": ["reasoning"]}]}, "invalid_field", "output[0].type",
                 id="responses-type-array"),
    pytest.param({"output": [{"type": "web_search_call"}]}, "invalid_field", "output[0].type",
                 id="responses-other-item"),
    pytest.param({"output": [{"type": "reasoning"}]}, "invalid_field", "output",
                 id="responses-nothing-to-run"),
    pytest.param({"output": [{"type": "function_call", "call_id": "c", "name": "x"}]},
                 "missing_field", "output[0].arguments", id="responses-item-no-arguments"),
]  # fmt: skip


@pytest.mark.parametrize(("body", "code", "field"), FRAMES)
def test_a_broken_frame_is_refused_naming_its_field(
    body: object, code: str, field: str | None
) -> None:
    error = refused(body)
    assert error.code == code, error.detail
    assert error.extra.get("field") == field
    if field is not None:
        assert f"'{field}'" in error.detail


def test_errors_the_tool_raises_are_moved_under_the_call() -> None:
    envelope = translate({"tool_calls": _calls(2)}, decode=decode_json)
    call = envelope.calls[1]
    error = ValidationFailed("missing required field 'start'", code="missing_field",
                             extra={"field": "start"})  # fmt: skip
    moved = relocated(error, call)
    assert moved.extra == {"field": "tool_calls[1].function.arguments.start"}
    assert moved.detail == "missing required field 'tool_calls[1].function.arguments.start'"
    alias = ValidationFailed(
        "give 'start' or 'start_time'", extra={"field": "arguments.start_time"}
    )
    assert relocated(alias, call).extra["field"] == "tool_calls[1].function.arguments.start_time"
    needed = ValidationFailed(
        "arguments need 'start' (or 'start_time')", extra={"field": "arguments.start"}
    )
    assert relocated(needed, call).detail == (
        "arguments need 'tool_calls[1].function.arguments.start' (or 'start_time')"
    )
    late = ValidationFailed("'start' is in the past", extra={"field": "start"})
    late.idempotency_key = "idem_1"
    assert relocated(late, call).idempotency_key == "idem_1"  # the answer still names it
    step = ValidationFailed("bad step", code="invalid_step", extra={"field": "step"})
    assert relocated(step, call) is step
    # slotward's own envelope names an argument as the tool's endpoint does.
    generic = one({"tool": CREATE_HOLD.name, "arguments": {}})
    assert relocated(error, generic) is error


# -- hostile bodies ----------------------------------------------------------------------

_JSON = st.recursive(
    _VALUES,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                 max_size=4),
    max_leaves=12,
)  # fmt: skip
_MEMBERS = st.sampled_from(
    ["type", "function", "name", "arguments", "input", "id", "tool", "tool_calls", "content",
     "role", "workflow_id", "step", "text", "output", "call_id"]
)  # fmt: skip
_NEAR = st.dictionaries(_MEMBERS, _JSON | st.sampled_from(
    ["function", "function_call", "tool_use", "text", "reasoning", "assistant", CREATE_HOLD.name,
     "{}", "[]", "{\"a\": NaN}"]
), max_size=6)  # fmt: skip
_BODIES = st.recursive(_NEAR, lambda inner: st.dictionaries(_MEMBERS, inner | st.lists(inner,
                       max_size=3), max_size=5), max_leaves=8)  # fmt: skip


@settings(max_examples=500, deadline=None)
@given(body=_JSON | _BODIES)
def test_any_body_translates_or_is_refused_naming_what_is_wrong(body: object) -> None:
    refusal: ValidationFailed | None = None
    try:
        envelope = translate(body, decode=decode_json, ignore=THOUGHTS)
    except ValidationFailed as error:  # anything else (a KeyError, a TypeError) fails here
        refusal = error
    if refusal is not None:
        assert refusal.code in {"invalid_body", "unknown_field", "missing_field",
                                "invalid_field", "invalid_step"}  # fmt: skip
        assert isinstance(refusal.extra.get("field"), str) or refusal.code == "invalid_body"
        return
    assert 1 <= len(envelope.calls) <= 16
    for call in envelope.calls:
        assert (call.envelope is None) != (call.refused is None)
        if call.envelope is not None:
            assert set(call.envelope) <= {"tool", "arguments", "workflow_id", "step"}
            assert isinstance(call.envelope["arguments"], dict)
        else:
            assert call.refused is not None
            assert isinstance(call.refused.extra["field"], str)
