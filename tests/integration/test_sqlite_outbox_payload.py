"""An event's payload is stored as JSON text that reads back as the value it was.

A hold's event is written by orjson (the create's hot path), anything else by
json; the two differ in bytes (non-ASCII escaped or not) but never in value,
and what orjson refuses falls back to json.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from slotward.adapters.store.outbox_repo import _payload, _payload_text

HOLD = {
    "id": "hold_1", "title": "Café – 会议 😀", "description": None, "priority": 50,
    "attendees": ["att_1", "att_2"], "token": 1,
}  # fmt: skip


@pytest.mark.parametrize(
    "payload",
    [
        {"hold": HOLD},
        {"hold": HOLD, "preempted_by": "hold_2"},
        {"hold": {**HOLD, "audit_seq": 2**70}},  # beyond 64 bits: json writes it
        {"hold": {**HOLD, "title": "\ud800"}},  # a lone surrogate: json escapes it
        {"hold": HOLD, 1: "a key that is not a string"},
    ],
)
def test_a_hold_events_payload_reads_back_as_it_was(payload: dict[Any, Any]) -> None:
    text = _payload_text("hold.created", payload)
    assert isinstance(text, str)
    assert json.loads(text) == json.loads(json.dumps(payload))


def test_the_relay_reads_a_hold_events_payload_as_written() -> None:
    payload = {"hold": HOLD, "preempted_by": "hold_2"}
    assert _payload("hold.created", _payload_text("hold.created", payload)) == payload


def test_other_events_are_written_by_json() -> None:
    payload = {"approval": {"summary": "Café", "n": 2**70}}
    text = _payload_text("approval.requested", payload)
    assert text == json.dumps(payload, separators=(",", ":"))
