"""Use cases after placement: commit, release (the compensation) and expiry."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import NoReturn

from slotward.engine.errors import Conflict, Forbidden, NotFound, SlotConflict, answering_for
from slotward.engine.model import Hold, HoldStatus, LedgerRecord, Principal, Reply
from slotward.engine.ports import Clock, IdGenerator, UnitOfWork
from slotward.engine.rules.audit import AuditKey
from slotward.engine.rules.conflicts import Blocked, Claim, decide
from slotward.engine.rules.documents import encode_hold, hold_document
from slotward.engine.rules.external import ExternalPolicy, ExternalView
from slotward.engine.rules.fingerprint import check_claimable, child_key, ledger_key, public_key
from slotward.engine.rules.holds import Commit, Release, apply
from slotward.engine.rules.policy import Policy
from slotward.engine.tools import COMMIT_HOLD, RELEASE_HOLD
from slotward.engine.usecases import approval_gate
from slotward.engine.usecases.approval_gate import Gate
from slotward.engine.usecases.effects import audit, emit
from slotward.engine.usecases.expiry import expire_hold, expire_stale
from slotward.engine.usecases.external import external_view
from slotward.engine.usecases.placing import replay_record

__all__ = ["HoldAction", "commit_hold", "expire_due", "release_hold"]

COMMIT_TOOL = COMMIT_HOLD.name
RELEASE_TOOL = RELEASE_HOLD.name


@dataclass(frozen=True)
class HoldAction:
    """A commit or release call on one hold."""

    principal: Principal
    hold_id: str
    token: int | None = None
    client_key: str | None = None


def _load(uow: UnitOfWork, action: HoldAction) -> Hold:
    hold = uow.holds.get(action.principal.tenant, action.hold_id)
    if hold is None:
        raise NotFound(f"no hold {action.hold_id!r}", code="hold_not_found")
    return hold


def _owner_only(hold: Hold, principal: Principal, *, admin_too: bool) -> None:
    if hold.agent_id == principal.agent_id or (admin_too and principal.role == "admin"):
        return
    raise Forbidden("only the agent that placed the hold may do this", code="not_hold_owner")


def commit_hold(
    uow: UnitOfWork,
    action: HoldAction,
    policy: Policy,
    clock: Clock,
    ids: IdGenerator,
    external: ExternalPolicy | None = None,
) -> Reply:
    """Commit a held (or expired but still free) hold; replay a repeated commit.

    The attendees' external busy time is checked again (``external``, as for a
    claim): a meeting put in a calendar since the hold was placed refuses the
    commit with 409 ``slot_conflict`` of kind ``external``; the hold stays held.
    """

    def commit(hold: Hold, now: datetime, derived: str) -> Reply:
        token = action.token if action.token is not None else -1
        moved, _ = apply(hold, Commit(token), now)
        gate = Gate(action.principal, public_key(ledger_key(action.client_key, derived)), now)
        waiting = approval_gate.governing(uow, hold, gate)
        if waiting is not None:
            return waiting
        view = external_view(uow, hold.tenant, hold.attendees, hold.start, hold.end, now, external)
        if view.blocks:
            _refuse_external(uow, action, hold, view, derived, policy, now)
        if hold.status_at(now) is HoldStatus.EXPIRED:
            _still_free(uow, hold, now)
            span = (hold.start, hold.end)
            expire_stale(uow, hold.tenant, hold.attendees, span, now, ids, keep=hold.id,
                         audit_key=policy.audit_key)  # fmt: skip
        waiting = approval_gate.required(uow, hold, gate, policy, ids)
        if waiting is not None:
            return waiting
        return _finish(
            uow, action, moved, "hold.commit", "hold.committed", derived, policy, now, ids,
            view.fields(),
        )  # fmt: skip

    return _act(uow, action, clock, "commit", commit)


def _refuse_external(
    uow: UnitOfWork,
    action: HoldAction,
    hold: Hold,
    view: ExternalView,
    derived: str,
    policy: Policy,
    now: datetime,
) -> NoReturn:
    """A commit refused by external time: audited, nothing else stored (as a refused claim)."""
    claim = Claim(hold.attendees, hold.start, hold.end, hold.priority, hold.intent_fp)
    decision = decide(claim, (), now, view.blocks)
    assert isinstance(decision, Blocked)
    key = ledger_key(action.client_key, derived)
    audit(uow, hold.tenant, action.principal.agent_id, now, "hold.commit", key, hold.id,
          "conflict", audit_key=policy.audit_key)  # fmt: skip
    uow.commit()
    raise SlotConflict(
        "the slot is taken (external) for at least one attendee: a meeting in their calendar",
        retryable=False,
        extra={"conflicts": list(decision.conflicts), "alternatives": [], **view.fields()},
    )


def release_hold(
    uow: UnitOfWork, action: HoldAction, policy: Policy, clock: Clock, ids: IdGenerator
) -> Reply:
    """Release a hold; a hold already preempted or released answers as it is."""

    def release(hold: Hold, now: datetime, derived: str) -> Reply:
        moved, changed = apply(hold, Release(), now)
        if not changed:
            return _answer(uow, action, moved, derived, policy, now, RELEASE_TOOL)
        return _finish(
            uow, action, moved, "hold.release", "hold.released", derived, policy, now, ids
        )

    return _act(uow, action, clock, "release", release)


def _act(
    uow: UnitOfWork,
    action: HoldAction,
    clock: Clock,
    kind: str,
    decide: Callable[[Hold, datetime, str], Reply],
) -> Reply:
    """What commit and release share: lock, load, check the owner, replay or decide.

    Only the owner commits; the owner or an admin of the tenant releases.
    """
    with uow:
        uow.lock_tenant(action.principal.tenant)
        now = clock.now()  # after the lock: writers that waited for it see fresh time
        hold = _load(uow, action)
        _owner_only(hold, action.principal, admin_too=kind == "release")
        derived = child_key(hold.key, kind)
        with answering_for(public_key(ledger_key(action.client_key, derived))):
            replay = _recorded(uow, hold, action, derived)
            if replay is not None:
                replay = replace(replay, hold_status=hold.status_at(now).value)
            else:
                check_claimable(ledger_key(action.client_key, derived), derived)
            reply = replay if replay is not None else decide(hold, now, derived)
        return replace(reply, workflow_id=hold.workflow_id)


def _recorded(uow: UnitOfWork, hold: Hold, action: HoldAction, derived: str) -> Reply | None:
    """The first answer of this commit (or release), under whatever key it came.

    Committing a committed hold replays the first commit even when the two calls
    carried different client keys: the hold has one commit, hence one answer.
    """
    record = uow.ledger.get(hold.tenant, ledger_key(action.client_key, derived))
    if record is None:
        record = uow.ledger.find_by_fingerprint(hold.tenant, derived)
    return None if record is None else replay_record(record, derived)


def _still_free(uow: UnitOfWork, hold: Hold, now: datetime) -> None:
    others = uow.holds.blocking(hold.tenant, hold.attendees, hold.start, hold.end, now)
    if any(o.id != hold.id and o.blocks_at(now) for o in others):
        raise Conflict("the hold expired and its slot has been taken since", code="hold_expired")


def _finish(
    uow: UnitOfWork,
    action: HoldAction,
    moved: Hold,
    audit_action: str,
    event: str,
    derived: str,
    policy: Policy,
    now: datetime,
    ids: IdGenerator,
    extra: Mapping[str, object] | None = None,
) -> Reply:
    uow.holds.save(moved)
    key = ledger_key(action.client_key, derived)
    audit(uow, moved.tenant, action.principal.agent_id, now, audit_action, key, moved.id, "fresh",
          audit_key=policy.audit_key)  # fmt: skip
    emit(uow, ids, moved, event, now)
    tool = COMMIT_TOOL if audit_action == "hold.commit" else RELEASE_TOOL
    return _answer(uow, action, moved, derived, policy, now, tool, extra)


def _answer(
    uow: UnitOfWork,
    action: HoldAction,
    hold: Hold,
    derived: str,
    policy: Policy,
    now: datetime,
    tool: str,
    extra: Mapping[str, object] | None = None,
) -> Reply:
    key = ledger_key(action.client_key, derived)
    body = encode_hold({**hold_document(hold, now), **(extra or {})})
    uow.ledger.add(
        LedgerRecord(
            tenant=hold.tenant, key=key, fingerprint=derived, state="succeeded", created=False,
            body=body, created_at=now, expires_at=now + policy.retention, hold_id=hold.id,
            workflow_id=hold.workflow_id, tool=tool, agent_id=action.principal.agent_id,
            completed_at=now,
        )
    )  # fmt: skip
    uow.commit()
    return Reply(created=False, body=body, key=public_key(key), replayed=False, hold_id=hold.id)


def expire_due(
    uow: UnitOfWork,
    clock: Clock,
    ids: IdGenerator,
    limit: int = 500,
    *,
    audit_key: AuditKey | None = None,
) -> int:
    """Mark one tenant's held holds past their expiry as expired; return how many.

    The sweeper calls it until it returns 0. One tenant per transaction, so the
    sweeper holds one tenant lock at a time and never makes one tenant wait for
    another's sweep; it looks again after the lock, since another writer (or
    another process's sweeper) may have got there first.
    """
    with uow:
        first = uow.holds.due_for_expiry(clock.now(), 1)
        if not first:
            return 0
        tenant = first[0].tenant
        uow.lock_tenant(tenant)
        now = clock.now()
        due = [h for h in uow.holds.due_for_expiry(now, limit) if h.tenant == tenant]
        for hold in due:
            expire_hold(uow, hold, now, ids, audit_key=audit_key)
        uow.commit()
        return len(due)
