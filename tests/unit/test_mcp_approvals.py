"""Over MCP a commit waiting for a person is a result saying what to do, not an error;
a denied or expired approval is an error whose ``next`` does not send the model round
in circles."""

from __future__ import annotations

from typing import Any

# The validator the mcp client checks structured content with (an mcp dependency,
# shipped without type stubs).
import jsonschema  # type: ignore[import-untyped]
import pytest

from slotward.api.mcp.results import AWAITING, Answer, next_step, problem_answer, tool_result
from slotward.api.tool_formats import output_schema
from slotward.engine.errors import Conflict
from slotward.engine.tools import COMMIT_HOLD, CREATE_HOLD, RELEASE_HOLD
from tests.unit.test_client_approvals import APPROVAL

HOLD: dict[str, Any] = {
    "id": "hold_1",
    "key": "idem_1",
    "workflow_id": "wf-board",
    "agent_id": "booker",
    "attendees": ["att_1", "att_2"],
    "start": "2030-10-14T14:00:00Z",
    "end": "2030-10-14T15:00:00Z",
    "title": "Board sync",
    "description": None,
    "priority": 50,
    "status": "held",
    "expires_at": "2030-10-02T09:00:00Z",
    "token": 1,
    "created_at": "2030-10-01T09:00:00Z",
    "updated_at": "2030-10-01T09:00:00Z",
    "committed_at": None,
    "preempted_by": None,
    "audit_seq": 3,
}
WAITING: dict[str, Any] = {
    "outcome": "approval_required",
    "detail": "a person must approve this commit first",
    "approval": APPROVAL,
    "hold": HOLD,
}


def test_a_commit_waiting_for_a_person_is_a_result_with_next() -> None:
    result = tool_result(Answer(WAITING, replayed=False, idempotency_key="idem_c"))
    assert not result.is_error
    assert result.structured_content == {**WAITING, "next": AWAITING}
    assert COMMIT_HOLD.name in AWAITING
    assert "`hold_id`" in AWAITING
    assert "`token`" in AWAITING


def test_the_commit_tool_schema_admits_the_hold_and_the_wait_and_nothing_else() -> None:
    validator = jsonschema.Draft202012Validator(output_schema(COMMIT_HOLD))
    assert output_schema(COMMIT_HOLD)["type"] == "object"  # MCP wants an object at the root
    waiting = tool_result(Answer(WAITING)).structured_content
    for document in (HOLD, {**HOLD, "status": "committed"}, waiting):
        assert list(validator.iter_errors(document)) == []
    for broken in ({**HOLD, "colour": "red"}, {**WAITING, "approval": {"id": "appr_1"}}):
        assert list(validator.iter_errors(broken)) != []
    assert list(validator.iter_errors({**WAITING, "outcome": "booked"})) != []
    create = jsonschema.Draft202012Validator(output_schema(CREATE_HOLD))
    assert list(create.iter_errors(waiting)) != []  # only a commit waits for a person


@pytest.mark.parametrize(
    ("code", "says", "never"),
    [
        ("approval_denied", RELEASE_HOLD.name, "call again"),
        ("approval_expired", "new `step`", "Retry"),
    ],
)
def test_a_refused_approval_is_an_error_that_says_not_to_commit_again(
    code: str, says: str, never: str
) -> None:
    error = Conflict("no", code=code, extra={"approval": {**APPROVAL, "note": "not now"}})
    result = tool_result(problem_answer(error))
    assert result.is_error is True
    problem = result.structured_content
    assert problem is not None
    assert (problem["code"], problem["approval"]["note"]) == (code, "not now")
    assert problem["next"] == next_step(problem)
    assert says in problem["next"]
    assert "do not commit it again" in problem["next"]
    assert never not in problem["next"]
