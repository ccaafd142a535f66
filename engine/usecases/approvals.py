"""Use cases of approvals: open one, decide it, read it, expire it.

Each is one transaction that locks its tenant first (an approval's decision
may move its hold's expiry: it excludes every write of the tenant's holds),
and every transition writes an audit entry and an outbox event beside it.
The commit gate that opens approvals for a tenant's policy is
engine/usecases/approval_gate.py.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any

from slotward.engine.approvals import HOLD_COMMIT, Approval, ApprovalStatus
from slotward.engine.errors import Conflict, Forbidden, NotFound, ValidationFailed, answering_for
from slotward.engine.model import Hold, HoldStatus, LedgerRecord, OutboxEvent, Principal, Reply
from slotward.engine.ports import Clock, IdGenerator, UnitOfWork
from slotward.engine.rules.approvals import Decision, apply_decision, expire
from slotward.engine.rules.audit import AuditKey
from slotward.engine.rules.documents import approval_document, encode
from slotward.engine.rules.fingerprint import (
    check_claimable,
    child_key,
    derive_key,
    ledger_key,
    public_key,
)
from slotward.engine.rules.policy import Policy
from slotward.engine.usecases.effects import audit

__all__ = [
    "REQUEST_TOOL",
    "ApprovalRequest",
    "DecisionRequest",
    "decide_approval",
    "expire_due_approvals",
    "get_approval",
    "list_approvals",
    "must_be_held",
    "open_approval",
    "request_approval",
]

# The ledger's name for the calls recorded here (they are not model tools).
REQUEST_TOOL = "request_approval"
DECIDE_TOOL = "decide_approval"


@dataclass(frozen=True)
class ApprovalRequest:
    """A validated ``POST /v1/approvals``: free of thought fields, checked by the rules."""

    principal: Principal
    workflow_id: str | None
    step: int | None
    summary: str
    evidence: Any
    action: dict[str, Any] | None
    expires_in: timedelta
    client_key: str | None = None

    @property
    def hold_id(self) -> str | None:
        """The hold whose commit this approval gates, if it gates one."""
        action = self.action
        return action["hold_id"] if action and action["type"] == HOLD_COMMIT else None

    def derived(self) -> str:
        """The key of a request that gates no hold: its intent is the action and evidence."""
        return derive_key(
            tenant=self.principal.tenant,
            workflow=self.workflow_id,
            tool=REQUEST_TOOL,
            intent={"action": self.action, "evidence": self.evidence},
            step=self.step,
        )


@dataclass(frozen=True)
class DecisionRequest:
    principal: Principal
    approval_id: str
    decision: Decision


def _load(uow: UnitOfWork, tenant: str, approval_id: str) -> Approval:
    found = uow.approvals.get(tenant, approval_id)
    if found is None:
        raise NotFound(f"no approval {approval_id!r}", code="approval_not_found")
    return found


def hold_approval_key(hold: Hold) -> str:
    """The derived key of a hold's approval: one per hold, however it was asked for."""
    return child_key(hold.key, "approval")


def request_approval(
    uow: UnitOfWork, req: ApprovalRequest, policy: Policy, clock: Clock, ids: IdGenerator
) -> Reply:
    """Open an approval, or replay the first answer of the same request.

    A ``hold.commit`` approval names a hold of the caller's that is still held;
    its key is its hold's, so a hold has one approval whoever asked for it.
    """
    tenant = req.principal.tenant
    with uow:
        uow.lock_tenant(tenant)
        now = clock.now()
        hold = None if req.hold_id is None else _own_hold(uow, req.principal, req.hold_id)
        derived = req.derived() if hold is None else hold_approval_key(hold)
        key = ledger_key(req.client_key, derived)
        with answering_for(public_key(key)):
            replay = _recorded(uow, tenant, key, derived, now)
            if replay is not None:
                return replay
            check_claimable(key, derived)
            if hold is not None:
                must_be_held(hold, now)
            approval = open_approval(
                uow, req, key=key, fingerprint=derived, hold=hold, policy=policy, now=now, ids=ids
            )
            body = encode(approval_document(approval, now))
            uow.commit()
    return Reply(
        created=True, body=body, key=public_key(key), replayed=False,
        workflow_id=approval.workflow_id, approval_id=approval.id,
    )  # fmt: skip


def _own_hold(uow: UnitOfWork, principal: Principal, hold_id: str) -> Hold:
    hold = uow.holds.get(principal.tenant, hold_id)
    if hold is None:
        raise NotFound(f"no hold {hold_id!r}", code="hold_not_found")
    if hold.agent_id != principal.agent_id:
        raise Forbidden(
            "only the agent that placed the hold may ask to commit it", code="not_hold_owner"
        )
    return hold


def must_be_held(hold: Hold, now: datetime) -> None:
    """Only a held hold waits for a person: one that lapsed, or moved on, is refused
    with its status's code (an approval never revives an expired hold)."""
    status = hold.status_at(now)
    if status is not HoldStatus.HELD:
        code = _NOT_HELD.get(status, "hold_expired")
        raise Conflict(
            f"the hold is {status.value}: only a held hold can wait for an approval", code=code
        )


_NOT_HELD = {
    HoldStatus.COMMITTED: "hold_committed",
    HoldStatus.RELEASED: "hold_released",
    HoldStatus.EXPIRED: "hold_expired",
    HoldStatus.PREEMPTED: "hold_preempted",
}


def _recorded(uow: UnitOfWork, tenant: str, key: str, derived: str, now: datetime) -> Reply | None:
    """The first answer of this request under its key (or, for a hold's approval,
    under any key), with the approval's status now."""
    record = uow.ledger.get(tenant, key)
    if record is None and key != derived:
        record = uow.ledger.find_by_fingerprint(tenant, derived)
    if record is None:
        return None
    if record.fingerprint != derived:
        raise ValidationFailed(
            "this Idempotency-Key was already used for a different request",
            code="idempotency_key_reused",
        )
    approval_id = _id_in(record.body)
    found = None if approval_id is None else uow.approvals.get(tenant, approval_id)
    return Reply(
        created=record.created, body=record.body, key=public_key(record.key), replayed=True,
        workflow_id=record.workflow_id, approval_id=approval_id,
        approval_status=None if found is None else found.status_at(now).value,
    )  # fmt: skip


def _id_in(body: bytes) -> str | None:
    doc = json.loads(body)
    found = doc.get("id") if isinstance(doc, dict) else None
    return found if isinstance(found, str) else None


def open_approval(
    uow: UnitOfWork,
    req: ApprovalRequest,
    *,
    key: str,
    fingerprint: str,
    hold: Hold | None,
    policy: Policy,
    now: datetime,
    ids: IdGenerator,
) -> Approval:
    """Store a new pending approval with its request's record, audit entry and event.

    A hold's approval keeps the hold alive while it is pending: the hold's
    expiry is stretched to the approval's (its own is kept, to be given back).
    The caller commits.
    """
    tenant = req.principal.tenant
    expires_at = now + req.expires_in
    seq = audit(uow, tenant, req.principal.agent_id, now, "approval.request", key,
                None if hold is None else hold.id, "fresh", audit_key=policy.audit_key)  # fmt: skip
    approval = Approval(
        id=ids.new_id("appr"), tenant=tenant, key=key,
        workflow_id=req.workflow_id if hold is None else hold.workflow_id,
        requested_by=req.principal.agent_id, summary=req.summary, evidence=req.evidence,
        action=req.action, status=ApprovalStatus.PENDING, created_at=now, updated_at=now,
        expires_at=expires_at, audit_seq=seq, hold_id=None if hold is None else hold.id,
        hold_expires_at=None if hold is None else hold.expires_at,
    )  # fmt: skip
    uow.approvals.add(approval)
    if hold is not None and hold.expires_at < expires_at:
        uow.holds.save(replace(hold, expires_at=expires_at, updated_at=now))
    uow.ledger.add(
        LedgerRecord(
            tenant=tenant, key=key, fingerprint=fingerprint, state="succeeded", created=True,
            body=encode(approval_document(approval, now)), created_at=now,
            expires_at=now + policy.retention, kind="approval",
            workflow_id=approval.workflow_id, tool=REQUEST_TOOL,
            agent_id=req.principal.agent_id, completed_at=now,
        )
    )  # fmt: skip
    emit_approval(uow, ids, approval, "approval.requested", now)
    return approval


def emit_approval(
    uow: UnitOfWork, ids: IdGenerator, approval: Approval, event_type: str, now: datetime
) -> None:
    """Queue ``event_type`` for ``approval``, in the transaction of its change."""
    payload = {"approval": approval_document(approval, now)}
    uow.outbox.add(OutboxEvent(ids.new_id("evt"), approval.tenant, event_type, now, payload))


def decide_approval(
    uow: UnitOfWork, req: DecisionRequest, policy: Policy, clock: Clock, ids: IdGenerator
) -> Reply:
    """Approve or deny; the same decision again replays the first answer.

    Never by the agent that asked. A hold's approval gives the hold its own
    expiry back; after an approval, at least the default hold TTL from now, so
    its agent has the time to commit.
    """
    tenant = req.principal.tenant
    with uow:
        uow.lock_tenant(tenant)
        now = clock.now()
        approval = _load(uow, tenant, req.approval_id)
        if approval.requested_by == req.principal.agent_id:
            raise Forbidden("an agent may not decide an approval it asked for", code="own_approval")
        key = child_key(approval.key, "decision")
        with answering_for(public_key(key)):
            moved, changed = apply_decision(approval, req.decision, now)
            if not changed:
                return _decided_again(uow, approval, key, now)
            uow.approvals.save(moved)
            kind = req.decision.kind
            outcome = "approved" if kind == "approve" else "denied"
            audit(uow, tenant, req.principal.agent_id, now, f"approval.{kind}", key,
                  approval.hold_id, outcome, audit_key=policy.audit_key)  # fmt: skip
            _give_back(uow, moved, now, policy)
            emit_approval(uow, ids, moved, f"approval.{outcome}", now)
            body = encode(approval_document(moved, now))
            uow.ledger.add(
                LedgerRecord(
                    tenant=tenant, key=key, fingerprint=key, state="succeeded", created=False,
                    body=body, created_at=now, expires_at=now + policy.retention,
                    kind="approval", workflow_id=approval.workflow_id, tool=DECIDE_TOOL,
                    agent_id=req.principal.agent_id, completed_at=now,
                )
            )  # fmt: skip
            uow.commit()
    return Reply(
        created=False, body=body, key=public_key(key), replayed=False,
        workflow_id=approval.workflow_id, approval_id=approval.id,
    )  # fmt: skip


def _decided_again(uow: UnitOfWork, approval: Approval, key: str, now: datetime) -> Reply:
    """The same decision again: its first answer (the document now, past retention)."""
    record = uow.ledger.get(approval.tenant, key)
    body = record.body if record is not None else encode(approval_document(approval, now))
    return Reply(
        created=False, body=body, key=public_key(key), replayed=True,
        workflow_id=approval.workflow_id, approval_id=approval.id,
        approval_status=approval.status_at(now).value,
    )  # fmt: skip


def _give_back(uow: UnitOfWork, approval: Approval, now: datetime, policy: Policy) -> None:
    """A decided approval gives its hold its own expiry back (never earlier than now)."""
    if approval.hold_id is None or approval.hold_expires_at is None:
        return
    hold = uow.holds.get(approval.tenant, approval.hold_id)
    if hold is None or hold.status is not HoldStatus.HELD:
        return
    own = approval.hold_expires_at
    if approval.status is ApprovalStatus.APPROVED:
        own = max(own, now + timedelta(seconds=policy.default_ttl_seconds))
    expires_at = max(own, now)
    if expires_at != hold.expires_at:
        uow.holds.save(replace(hold, expires_at=expires_at, updated_at=now))


def get_approval(
    uow: UnitOfWork, principal: Principal, approval_id: str, now: datetime
) -> tuple[dict[str, Any], bool]:
    """The approval as a document, and whether it is still pending at ``now``."""
    with uow:
        approval = _load(uow, principal.tenant, approval_id)
    pending = approval.status_at(now) is ApprovalStatus.PENDING
    return approval_document(approval, now), pending


def list_approvals(
    uow: UnitOfWork,
    principal: Principal,
    *,
    statuses: list[ApprovalStatus] | None,
    cursor: str | None,
    limit: int,
    now: datetime,
) -> dict[str, Any]:
    """One page of the tenant's approvals, oldest first; ``next_cursor`` is the last id."""
    with uow:
        found = uow.approvals.search(
            principal.tenant, statuses=statuses, after_id=cursor, limit=limit + 1, now=now
        )
    page = found[:limit]
    more = len(found) > limit
    return {
        "items": [approval_document(a, now) for a in page],
        "next_cursor": page[-1].id if more and page else None,
    }


def expire_due_approvals(
    uow: UnitOfWork,
    clock: Clock,
    ids: IdGenerator,
    limit: int = 500,
    *,
    audit_key: AuditKey | None,
) -> list[Approval]:
    """Mark one tenant's pending approvals past their expiry as expired; return them.

    The sweeper calls it until it returns none, one tenant per transaction (as
    ``expire_due`` does for holds). The gated hold needs nothing: its expiry
    was the approval's, so it expires with it.
    """
    with uow:
        first = uow.approvals.due_for_expiry(clock.now(), 1)
        if not first:
            return []
        tenant = first[0].tenant
        uow.lock_tenant(tenant)
        now = clock.now()
        due = [a for a in uow.approvals.due_for_expiry(now, limit) if a.tenant == tenant]
        done = []
        for approval in due:
            moved, changed = expire(approval, now)
            if changed:
                uow.approvals.save(moved)
                audit(uow, tenant, "system", now, "approval.expire", None, approval.hold_id,
                      "expired", audit_key=audit_key)  # fmt: skip
                emit_approval(uow, ids, moved, "approval.expired", now)
                done.append(moved)
        uow.commit()
        return done
