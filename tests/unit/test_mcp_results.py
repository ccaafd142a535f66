"""Answers become MCP tool results: problems as tool errors saying what to do next."""

from __future__ import annotations

import json

import pytest

from slotward.api.mcp.results import Answer, next_step, problem_answer, tool_result
from slotward.engine.errors import (
    Forbidden,
    InProgress,
    NotFound,
    SlotConflict,
    SlotwardError,
    ValidationFailed,
)
from slotward.engine.tools import CREATE_HOLD, FIND_FREE_SLOTS


def test_a_conflict_is_a_tool_error_with_its_alternatives() -> None:
    slot = {"start": "2030-10-14T14:30:00Z", "end": "2030-10-14T15:00:00Z"}
    error = SlotConflict("alex is busy", extra={"conflicts": [], "alternatives": [slot]})
    result = tool_result(problem_answer(error))
    assert result.is_error is True
    assert result.structured_content is not None
    problem = result.structured_content
    assert (problem["code"], problem["status"], problem["alternatives"]) == (
        "slot_conflict", 409, [slot]
    )  # fmt: skip
    assert CREATE_HOLD.name in problem["next"]
    assert FIND_FREE_SLOTS.name in problem["next"]
    text = result.content[0]
    assert text.type == "text"
    assert json.loads(text.text.splitlines()[-1]) == problem


def test_a_conflict_with_ones_own_hold_says_how_to_get_it_back() -> None:
    mine = {"attendee": "att_1", "start": "2030-10-14T14:00:00Z", "same_intent": True}
    error = SlotConflict("taken", extra={"conflicts": [mine], "alternatives": []})
    assert "`workflow_id`" in next_step(problem_answer(error).document)
    other = SlotConflict("taken", extra={"conflicts": [{**mine, "same_intent": False}]})
    assert "`workflow_id`" not in next_step(problem_answer(other).document)


def test_a_document_is_structured_content_and_its_json() -> None:
    result = tool_result(Answer({"id": "hold_1"}, replayed=True, idempotency_key="idem_1"))
    assert not result.is_error
    assert result.structured_content == {"id": "hold_1"}
    assert result.meta == {"slotward/replayed": True, "slotward/idempotency_key": "idem_1"}


@pytest.mark.parametrize(
    ("error", "says"),
    [
        (InProgress("busy", retry_after=2), "after 2 s"),
        (ValidationFailed("bad", code="invalid_field", extra={"field": "start"}), "`start`"),
        (Forbidden("no", code="role_forbidden"), "tell the user"),
        (NotFound("gone", code="hold_not_found"), "Check the id"),
        (SlotwardError("oops", retryable=True), "Retry the same call"),
    ],
)
def test_every_problem_says_what_to_do(error: SlotwardError, says: str) -> None:
    assert says in next_step(problem_answer(error).document)


def test_an_unknown_code_from_a_server_still_gets_advice() -> None:
    assert next_step({"code": "from_the_future", "retryable": False})
