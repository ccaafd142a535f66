"""The answers of a batch and of ``?reply=`` (api/tool_results.py): the shapes the
model APIs take next, an error as a result the model can act on."""

from __future__ import annotations

import json

import pytest

from slotward.api.tool_results import Outcome, batch_document, check_reply, reply_for, what_to_do
from slotward.engine.errors import ValidationFailed
from slotward.engine.model import Reply
from slotward.engine.tools import CREATE_HOLD, FIND_FREE_SLOTS

HOLD = {"id": "hold_1", "status": "held", "token": 1}
CONFLICT = {
    "type": "urn:slotward:problem:slot_conflict", "title": "Slot conflict", "status": 409,
    "code": "slot_conflict", "retryable": False, "conflicts": [{"kind": "held"}],
    "alternatives": [{"start": "2030-10-14T13:00:00Z", "end": "2030-10-14T13:30:00Z"}],
}  # fmt: skip
PLACED = Outcome("call_1", CREATE_HOLD.name, 201, "idem_1", False, HOLD)
TAKEN = Outcome("call_2", CREATE_HOLD.name, 409, "idem_2", False, CONFLICT)


def test_an_openai_reply_is_one_tool_message_per_call() -> None:
    single = reply_for("openai", [PLACED], batch=False)
    assert single == {"role": "tool", "tool_call_id": "call_1", "content": json.dumps(HOLD,
                      separators=(",", ":"))}  # fmt: skip
    batch = reply_for("openai", [PLACED, TAKEN], batch=True)
    assert [m["tool_call_id"] for m in batch] == ["call_1", "call_2"]
    shown = json.loads(batch[1]["content"])
    assert shown["alternatives"] == CONFLICT["alternatives"]
    assert f"call {CREATE_HOLD.name} again" in shown["what_to_do"]


def test_a_responses_reply_is_one_function_call_output_per_call() -> None:
    items = reply_for("openai", [PLACED, TAKEN], batch=True, responses=True)
    assert [(i["type"], i["call_id"]) for i in items] == [
        ("function_call_output", "call_1"),
        ("function_call_output", "call_2"),
    ]
    assert json.loads(items[0]["output"]) == HOLD
    assert reply_for("openai", [PLACED], batch=False, responses=True) == items[0]


def test_an_anthropic_reply_is_one_user_message_of_tool_results() -> None:
    message = reply_for("anthropic", [PLACED, TAKEN], batch=True)
    assert message["role"] == "user"
    blocks = message["content"]
    assert [(b["type"], b["tool_use_id"], b["is_error"]) for b in blocks] == [
        ("tool_result", "call_1", False),
        ("tool_result", "call_2", True),
    ]
    assert json.loads(blocks[0]["content"]) == HOLD
    assert reply_for("anthropic", [PLACED], batch=False)["content"] == blocks[:1]


def test_a_batch_document_keeps_each_calls_status_and_key() -> None:
    read = Outcome(None, FIND_FREE_SLOTS.name, 200, None, None, {"slots": []})
    results = batch_document([PLACED, TAKEN, read])["results"]
    assert [(r["index"], r["status"], r["idempotency_key"], r["replayed"]) for r in results] == [
        (0, 201, "idem_1", False),
        (1, 409, "idem_2", False),
        (2, 200, None, None),
    ]
    assert results[0]["body"] == HOLD
    assert results[1]["problem"] == CONFLICT
    assert "body" not in results[1]


def test_what_to_do_fits_the_problem() -> None:
    assert "alternatives" in what_to_do(CONFLICT)
    assert "same arguments" in what_to_do({"code": "store_unavailable", "retryable": True})
    assert "'step'" in what_to_do({"code": "invalid_step", "status": 422, "field": "step"})
    assert "hold_id" in what_to_do({"code": "hold_not_found", "status": 404})


def test_a_reply_format_is_one_of_two() -> None:
    assert check_reply(None) is None
    assert check_reply("anthropic") == "anthropic"
    with pytest.raises(ValidationFailed) as caught:
        check_reply("OpenAI")
    assert caught.value.extra == {"field": "reply"}


def test_a_replayed_write_in_a_batch_says_the_holds_status_now() -> None:
    replay = Reply(created=False, body=b"{}", key="idem_3", replayed=True, hold_status="released")
    committed = {"id": "hold_1", "status": "committed"}
    again = Outcome("call_3", CREATE_HOLD.name, 200, "idem_3", True, committed, reply=replay)
    (entry,) = batch_document([again])["results"]
    assert (entry["body"]["status"], entry["hold_status"]) == ("committed", "released")
    assert "hold_status" not in batch_document([PLACED])["results"][0]
    shown = json.loads(reply_for("openai", [again], batch=False)["content"])
    assert (shown["status"], shown["hold_status"]) == ("committed", "released")
    assert "hold_status" not in json.loads(reply_for("openai", [PLACED], batch=False)["content"])


def test_the_seconds_to_wait_reach_the_model_and_the_batch() -> None:
    busy = {"type": "urn:slotward:problem:request_in_progress", "status": 409,
            "code": "request_in_progress", "retryable": True}  # fmt: skip
    waiting = Outcome("call_1", CREATE_HOLD.name, 409, "idem_1", False, busy, retry_after=2)
    shown = json.loads(reply_for("openai", [waiting], batch=False)["content"])
    assert "retry_after seconds" in shown["what_to_do"]
    assert shown["retry_after"] == 2
    (block,) = reply_for("anthropic", [waiting], batch=True)["content"]
    assert json.loads(block["content"])["retry_after"] == 2
    (entry,) = batch_document([waiting])["results"]
    assert entry["retry_after"] == 2
    assert "retry_after" not in batch_document([TAKEN])["results"][0]


def test_the_advice_after_a_lost_hold_leads_to_another_slot() -> None:
    for code in ("hold_released", "hold_expired"):
        advice = what_to_do({"code": code, "status": 409})
        assert FIND_FREE_SLOTS.name in advice, code
        assert CREATE_HOLD.name in advice, code
        assert "another" in advice, code
    assert "new step" in what_to_do({"code": "hold_released"})
