"""The client's typed answers and errors: tolerant parsing, the error a code becomes."""

from __future__ import annotations

from typing import Any

import pytest

import slotward.api.client as client
from slotward.api.client import (
    Availability,
    Hold,
    HoldLost,
    SlotConflict,
    SlotwardError,
    ToolAnswer,
    Unreachable,
)
from slotward.api.client.errors import error_from

HOLD: dict[str, Any] = {
    "id": "hold_1",
    "key": "idem_1",
    "workflow_id": "wf-42",
    "agent_id": "agent-a",
    "attendees": ["att_1"],
    "start": "2030-10-14T14:00:00Z",
    "end": "2030-10-14T14:30:00Z",
    "title": "Sync",
    "description": None,
    "priority": 50,
    "status": "held",
    "expires_at": "2030-10-01T09:05:00Z",
    "token": 1,
    "committed_at": None,
    "preempted_by": None,
}


def test_the_public_names_are_pinned() -> None:
    assert sorted(client.__all__) == [
        "Alternative", "Approval", "ApprovalPending", "ApprovalRefused", "Availability", "Busy",
        "Conflict", "Hold", "HoldLost", "Interval",
        "RetryEvent", "RetryPolicy", "SlotConflict", "Slotward", "SlotwardError",
        "SyncSlotward", "ToolAnswer", "Unreachable",
    ]  # fmt: skip


def test_a_tool_answer_says_replayed_only_when_the_headers_do() -> None:
    write = ToolAnswer.parse(HOLD, {"idempotent-replayed": "true", "IDEMPOTENCY-KEY": "idem_1"})
    assert (write.document, write.replayed, write.idempotency_key) == (HOLD, True, "idem_1")
    read = ToolAnswer.parse({"slots": []}, {})
    assert (read.replayed, read.idempotency_key) == (None, None)
    assert ToolAnswer.parse([1], {}).document == {"result": [1]}


def test_a_replay_carries_its_headers_and_the_status_now() -> None:
    headers = {
        "Idempotency-Key": "idem_1",
        "Idempotent-Replayed": "true",
        "slotward-hold-status": "released",  # header names are case-insensitive
    }
    hold = Hold.parse(HOLD, headers)
    assert (hold.id, hold.token, hold.attendees, hold.status) == ("hold_1", 1, ("att_1",), "held")
    assert (hold.replayed, hold.idempotency_key, hold.status_now) == (True, "idem_1", "released")
    first = Hold.parse(HOLD, {"Idempotent-Replayed": "false"})
    assert (first.replayed, first.status_now, first.idempotency_key) == (False, "held", "idem_1")


def test_a_field_added_later_is_kept_and_a_mistyped_one_reads_as_none() -> None:
    doc = {**HOLD, "token": "1", "priority": True, "attendees": ["att_1", 7], "room": "4B"}
    hold = Hold.parse(doc)
    assert (hold.token, hold.priority, hold.attendees) == (None, None, ("att_1",))
    assert hold.raw["room"] == "4B"
    assert Hold.parse({}).id == ""  # nothing to read is no crash either


def test_availability_parses_busy_free_and_slots_and_skips_junk() -> None:
    doc = {
        "attendees": ["att_1"],
        "busy": [{"attendee": "att_1", "start": "a", "end": "b", "kind": "held"}, "junk"],
        "free": [{"start": "b", "end": "c"}],
        "slots": [{"start": "b", "end": "b2", "score": 3}],
        "next": "later",
    }
    found = Availability.parse(doc)
    assert [(b.attendee, b.kind) for b in found.busy] == [("att_1", "held")]
    assert [(f.start, f.end) for f in found.free] == [("b", "c")]
    assert found.slots[0].raw["score"] == 3
    assert Availability.parse({"busy": "none"}).busy == ()


def test_a_slot_conflict_carries_conflicts_and_alternatives() -> None:
    problem = {
        "code": "slot_conflict",
        "detail": "the slot is taken",
        "retryable": True,
        "conflicts": [{"attendee": "att_1", "kind": "held", "priority": 50, "same_intent": True}],
        "alternatives": [{"start": "s1", "end": "e1"}, {"start": "s2", "end": "e2"}],
    }
    error = error_from(409, problem, retry_after=300.0, idempotency_key="idem_2")
    assert isinstance(error, SlotConflict)
    assert error.alternatives == problem["alternatives"]  # as dicts, to hand to a model
    assert [a.start for a in error.alternative_slots] == ["s1", "s2"]
    assert error.conflict_entries[0].priority == 50
    assert error.same_intent is True
    assert (error.status, error.retryable, error.retry_after) == (409, True, 300.0)
    assert error.idempotency_key == "idem_2"
    assert str(error) == "409 slot_conflict: the slot is taken"


@pytest.mark.parametrize("code", ["hold_expired", "hold_preempted", "hold_released"])
def test_a_hold_that_can_no_longer_be_committed_is_hold_lost(code: str) -> None:
    assert type(error_from(409, {"code": code, "detail": "x"})) is HoldLost


@pytest.mark.parametrize(
    ("status", "body", "code"),
    [
        (422, {"code": "invalid_field", "detail": "bad", "field": "start"}, "invalid_field"),
        (502, b"<html>bad gateway</html>", None),  # not a problem document at all
        (500, {"code": 7, "detail": ["x"]}, None),
    ],
)
def test_any_other_answer_is_a_plain_error_with_the_servers_code(
    status: int, body: object, code: str | None
) -> None:
    error = error_from(status, body)
    assert type(error) is SlotwardError
    assert (error.status, error.code) == (status, code)
    assert error.detail
    assert not isinstance(error, SlotConflict)


def test_no_answer_is_an_error_of_the_same_tree() -> None:
    error = Unreachable(0, "timeout", "POST /v1/holds: no answer", retryable=True)
    assert isinstance(error, SlotwardError)
    assert repr(error) == "Unreachable(status=0, code='timeout')"
