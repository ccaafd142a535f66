"""The model APIs' wrappers as their SDKs dump them: a member a vendor adds
(``caller`` on a tool_use block, ``stop_details`` on a message) carries no
intent and is ignored, so the next SDK release does not break a caller; the
call's own members and its arguments stay checked."""

from __future__ import annotations

import json

import pytest

from slotward.api.envelopes import translate
from slotward.api.http.jsonbody import decode_json
from slotward.engine.errors import ValidationFailed
from slotward.engine.tools import RELEASE_HOLD

USE = {"id": "toolu_1", "caller": {"type": "direct"}, "input": {"hold_id": "h"},
       "name": RELEASE_HOLD.name, "type": "tool_use", "toolset_name": None}  # fmt: skip


def test_an_anthropic_message_as_the_current_sdk_dumps_it_is_taken() -> None:
    message = {"id": "msg_1", "container": None, "content": [USE], "model": "claude-sonnet-4-5",
               "role": "assistant", "stop_details": None, "stop_reason": "tool_use",
               "stop_sequence": None, "type": "message", "usage": {"input_tokens": 1},
               "workflow_id": "wf"}  # fmt: skip
    (call,) = translate(message, decode=decode_json).calls
    assert call.call_id == "toolu_1"
    assert call.envelope == {"tool": RELEASE_HOLD.name, "arguments": {"hold_id": "h"},
                             "workflow_id": "wf"}  # fmt: skip


def test_vendor_members_of_blocks_messages_and_items_are_ignored() -> None:
    (single,) = translate({**USE, "workflow_id": "wf"}, decode=decode_json).calls
    assert single.envelope is not None
    assert set(single.envelope) == {"tool", "arguments", "workflow_id"}
    openai = {"id": "c", "type": "function", "index": 0,
              "function": {"name": RELEASE_HOLD.name, "arguments": '{"hold_id":"h"}'}}  # fmt: skip
    message = {"role": "assistant", "tool_calls": [openai], "reasoning_content": "..."}
    assert translate(message, decode=decode_json).calls[0].envelope is not None
    item = {"type": "function_call", "call_id": "c", "name": RELEASE_HOLD.name,
            "arguments": '{"hold_id":"h"}', "namespace": None}  # fmt: skip
    assert translate({"output": [item]}, decode=decode_json).calls[0].envelope is not None


def test_the_calls_own_members_stay_checked() -> None:
    with pytest.raises(ValidationFailed) as refused:
        translate({"content": [{**USE, "name": 3}]}, decode=decode_json)
    assert refused.value.extra["field"] == "content[0].name"
    with pytest.raises(ValidationFailed) as refused:
        translate({**USE, "type": "tool_use", "id": 7}, decode=decode_json)
    assert refused.value.extra["field"] == "id"


def test_an_anthropic_input_text_is_not_said_to_be_accepted() -> None:
    body = {**USE, "input": json.dumps({"hold_id": "h"})}
    (call,) = translate(body, decode=decode_json).calls
    assert call.refused is not None
    assert call.refused.extra["field"] == "input"
    assert "JSON text" not in call.refused.detail
    assert "must be a JSON object, got a string" in call.refused.detail


@pytest.mark.parametrize("text", ["", " ", "\n\t\r "])
def test_empty_or_json_whitespace_arguments_are_no_arguments(text: str) -> None:
    (call,) = translate({"id": "c", "type": "function",
                         "function": {"name": RELEASE_HOLD.name, "arguments": text}},
                        decode=decode_json).calls  # fmt: skip
    assert call.envelope is not None
    assert call.envelope["arguments"] == {}


@pytest.mark.parametrize("text", ["\u00a0", "\u2028", " \u3000 "])
def test_other_whitespace_is_not_read_as_no_arguments(text: str) -> None:
    (call,) = translate({"id": "c", "type": "function",
                         "function": {"name": RELEASE_HOLD.name, "arguments": text}},
                        decode=decode_json).calls  # fmt: skip
    assert call.refused is not None
    assert call.refused.extra["field"] == "function.arguments"
