"""The commit gate: a commit waits for a person's approval where one governs it.

Inside ``commit_hold``'s transaction (engine/usecases/lifecycle.py), after the
replay, status and token checks:

- ``governing``: the hold's approval, if it has one (opened by the tenant's
  policy or asked for by the agent), decides first: pending answers 202 with
  it, denied and expired refuse (409), approved lets the commit go on.
- ``required``: a hold without an approval whose commit a rule of the
  tenant's policy matches gets one opened (after the slot checks, so nobody
  is asked to approve a commit that would be refused anyway) and answers 202.

Nothing is recorded under the commit's key for a 202: the same commit call
gets the outcome once a person has decided.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from slotward.engine.approvals import HOLD_COMMIT, Approval, ApprovalStatus
from slotward.engine.errors import Conflict
from slotward.engine.model import Hold, Principal, Reply
from slotward.engine.ports import IdGenerator, UnitOfWork
from slotward.engine.rules.approvals import DEFAULT_EXPIRY, gate_summary, matched_rules
from slotward.engine.rules.documents import approval_document, encode, hold_document
from slotward.engine.rules.policy import Policy
from slotward.engine.usecases.approvals import (
    ApprovalRequest,
    hold_approval_key,
    must_be_held,
    open_approval,
)

__all__ = ["Gate", "governing", "required"]


@dataclass(frozen=True)
class Gate:
    """What a gated commit answers with: the commit's key, the caller, the time."""

    principal: Principal
    key: str  # the commit's public key, for the 202's Idempotency-Key
    now: datetime


def governing(uow: UnitOfWork, hold: Hold, gate: Gate) -> Reply | None:
    """The hold's approval's say: a 202 while pending, a refusal once denied or
    expired, None when approved or when there is none."""
    approval = uow.approvals.for_hold(hold.tenant, hold.id)
    if approval is None:
        return None
    seen = approval.status_at(gate.now)
    if seen is ApprovalStatus.APPROVED:
        return None
    if seen is ApprovalStatus.DENIED:
        note = f" (note: {approval.note})" if approval.note else ""
        raise Conflict(
            f"{approval.decided_by} denied this commit{note}; the hold stays as it is "
            "until it expires or is released",
            code="approval_denied",
            extra={"approval": approval_document(approval, gate.now)},
        )
    if seen is ApprovalStatus.EXPIRED:
        raise Conflict(
            "the approval this commit waited for expired before anyone decided; "
            "place the hold again to ask again",
            code="approval_expired",
            extra={"approval": approval_document(approval, gate.now)},
        )
    return _waiting(hold, approval, gate)


def required(
    uow: UnitOfWork, hold: Hold, gate: Gate, policy: Policy, ids: IdGenerator
) -> Reply | None:
    """Open the hold's approval when the tenant's policy wants one (and commit it);
    None when no rule matches."""
    found = uow.approvals.rules(hold.tenant)
    if found is None or uow.approvals.for_hold(hold.tenant, hold.id) is not None:
        return None  # no rules, or the hold's approval has had its say (approved)
    rules = found[0]
    emails: dict[str, tuple[str, ...]] = {}
    if rules.outside_domains is not None:
        emails = {e.id: e.emails for e in uow.directory.entries(hold.tenant, hold.attendees)}
    reasons = matched_rules(rules, hold, emails)
    if not reasons:
        return None
    must_be_held(hold, gate.now)  # a lapsed hold is placed again, not approved
    req = ApprovalRequest(
        principal=gate.principal, workflow_id=hold.workflow_id, step=None,
        summary=gate_summary(hold),
        evidence={"rules": reasons, "hold": hold_document(hold, gate.now)},
        action={"type": HOLD_COMMIT, "hold_id": hold.id}, expires_in=DEFAULT_EXPIRY,
    )  # fmt: skip
    key = hold_approval_key(hold)
    approval = open_approval(
        uow, req, key=key, fingerprint=key, hold=hold, policy=policy, now=gate.now, ids=ids
    )
    reply = _waiting(uow.holds.get(hold.tenant, hold.id) or hold, approval, gate)
    uow.commit()
    return reply


def _waiting(hold: Hold, approval: Approval, gate: Gate) -> Reply:
    body = {
        "outcome": "approval_required",
        "detail": "a person must approve this commit first: wait for the approval "
        f"(GET /v1/approvals/{approval.id}?wait=60), then send the same commit again",
        "approval": approval_document(approval, gate.now),
        "hold": hold_document(hold, gate.now),
    }
    return Reply(
        created=False, body=encode(body), key=gate.key, replayed=False, hold_id=hold.id,
        workflow_id=hold.workflow_id, accepted=True, approval_id=approval.id,
    )  # fmt: skip
