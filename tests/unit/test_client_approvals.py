"""The client's approvals read tolerantly, and the errors a gated commit becomes."""

from __future__ import annotations

from typing import Any

import pytest

from slotward.api.client import Approval, ApprovalPending, ApprovalRefused, SlotwardError
from slotward.api.client.errors import approval_pending, error_from
from tests.unit.test_client_results import HOLD

APPROVAL: dict[str, Any] = {
    "id": "appr_1",
    "key": "idem_9",
    "workflow_id": "wf-board",
    "requested_by": "booker",
    "summary": "Commit hold_1: 2 attendees",
    "evidence": {"hold": {"id": "hold_1"}, "rules": ["attendees_more_than"]},
    "action": {"type": "hold.commit", "hold_id": "hold_1"},
    "hold_id": "hold_1",
    "status": "pending",
    "created_at": "2030-10-01T09:00:00Z",
    "updated_at": "2030-10-01T09:00:00Z",
    "expires_at": "2030-10-02T09:00:00Z",
    "decided_by": None,
    "decided_at": None,
    "note": None,
    "audit_seq": 4,
}


def test_an_approval_reads_its_fields_and_the_headers() -> None:
    headers = {
        "Idempotency-Key": "idem_9",
        "idempotent-replayed": "true",
        "Slotward-Approval-Status": "approved",
    }
    approval = Approval.parse(APPROVAL, headers)
    assert (approval.id, approval.status, approval.hold_id) == ("appr_1", "pending", "hold_1")
    assert approval.evidence == APPROVAL["evidence"]
    assert approval.action == {"type": "hold.commit", "hold_id": "hold_1"}
    assert (approval.replayed, approval.status_now) == (True, "approved")
    assert approval.idempotency_key == "idem_9"
    read = Approval.parse(APPROVAL)
    assert (read.replayed, read.status_now, read.idempotency_key) == (False, "pending", "idem_9")
    assert "evidence" not in repr(read)  # up to 32 KiB of it: in .evidence, not the repr


def test_an_approval_tolerates_what_it_does_not_expect() -> None:
    doc = {**APPROVAL, "action": "refund", "note": 3, "evidence": None, "urgency": "high"}
    approval = Approval.parse(doc)
    assert (approval.action, approval.note, approval.evidence) == (None, None, None)
    assert approval.raw["urgency"] == "high"
    assert Approval.parse({}).id == ""


def test_a_202_is_approval_pending_with_its_approval_and_hold() -> None:
    body = {
        "outcome": "approval_required",
        "detail": "a person must approve this commit first",
        "approval": APPROVAL,
        "hold": HOLD,
    }
    pending = approval_pending(body, {"idempotency-key": "idem_c"})
    assert isinstance(pending, SlotwardError)
    assert (pending.status, pending.code, pending.retryable) == (202, "approval_required", True)
    assert (pending.approval.id, pending.hold.id) == ("appr_1", "hold_1")
    assert pending.idempotency_key == "idem_c"
    assert str(pending) == "202 approval_required: a person must approve this commit first"
    garbled = approval_pending(["not", "a", "document"], {})
    assert (garbled.approval.id, garbled.hold.id, garbled.detail) == (
        "", "", "a person must approve this commit first"
    )  # fmt: skip


@pytest.mark.parametrize("code", ["approval_denied", "approval_expired"])
def test_a_refused_approval_is_approval_refused_with_the_approval(code: str) -> None:
    ended = {**APPROVAL, "status": code.removeprefix("approval_"), "note": "not now"}
    error = error_from(409, {"code": code, "detail": "x", "approval": ended})
    assert type(error) is ApprovalRefused
    assert (error.approval.id, error.approval.note) == ("appr_1", "not now")
    assert error.approval.status == code.removeprefix("approval_")
    assert not isinstance(error, ApprovalPending)
    bare = error_from(409, {"code": code})
    assert isinstance(bare, ApprovalRefused)
    assert bare.approval.id == ""  # no approval member: no crash
