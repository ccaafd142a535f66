"""Use case: place a hold (the ``create_calendar_hold`` tool).

Everything happens in one transaction: the replay checks, the conflict
decision, the preemptions, the new hold, its idempotency record with the
stored answer, the audit entries and the outbox events.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from slotward.engine.errors import SlotConflict, ValidationFailed, answering_for
from slotward.engine.model import Hold, HoldStatus, LedgerRecord, Principal, Reply
from slotward.engine.ports import ClaimLookup, Clock, IdGenerator, UnitOfWork
from slotward.engine.rules import conflicts
from slotward.engine.rules.attendees import AttendeeRef, ResolvedAttendees, resolve_attendees
from slotward.engine.rules.audit import AuditKey
from slotward.engine.rules.documents import encode_hold, hold_document
from slotward.engine.rules.external import ExternalPolicy, ExternalView
from slotward.engine.rules.fingerprint import (
    check_claimable,
    derive_key,
    hold_intent,
    intent_fingerprint,
    ledger_key,
    public_key,
)
from slotward.engine.rules.holds import Preemption, apply
from slotward.engine.rules.policy import Policy
from slotward.engine.rules.timenorm import Interval, format_instant
from slotward.engine.tools import CREATE_HOLD
from slotward.engine.usecases.effects import audit, emit
from slotward.engine.usecases.expiry import expire_stale
from slotward.engine.usecases.external import blocks_between, external_view

__all__ = ["HoldRequest", "Lookup", "lookup_replay", "place_hold"]

TOOL = CREATE_HOLD.name


@dataclass(frozen=True)
class HoldRequest:
    """A validated create call; attendees are parsed but not yet resolved."""

    principal: Principal
    workflow_id: str
    step: int | None
    attendees: tuple[AttendeeRef, ...]
    interval: Interval
    title: str
    description: str | None
    priority: int
    ttl_seconds: int
    client_key: str | None = None


@dataclass(frozen=True)
class _Prepared:
    resolved: ResolvedAttendees
    key: str
    fingerprint: str
    intent_fp: str


def _prepare(uow: UnitOfWork, req: HoldRequest, policy: Policy) -> _Prepared:
    tenant = req.principal.tenant
    emails = [a.value for a in req.attendees if a.kind == "email"]
    ids = [a.value for a in req.attendees if a.kind == "id"]
    directory, known = uow.directory.lookup(tenant, emails, ids)
    resolved = resolve_attendees(
        tenant,
        req.attendees,
        directory=directory,
        known_ids=known,
        allow_unknown=policy.allow_unknown_attendees,
    )
    intent = hold_intent(resolved.ids, req.interval)
    derived = derive_key(
        tenant=tenant, workflow=req.workflow_id, tool=TOOL, intent=intent, step=req.step
    )
    return _Prepared(
        resolved=resolved,
        key=ledger_key(req.client_key, derived),
        fingerprint=derived,
        intent_fp=intent_fingerprint(tenant=tenant, tool=TOOL, intent=intent),
    )


def _lookup(
    uow: UnitOfWork,
    req: HoldRequest,
    prep: _Prepared,
    now: datetime,
    span: tuple[datetime, datetime] | None = None,
) -> ClaimLookup:
    # All at once (one round trip): most creates are fresh, and need all of it;
    # a write asks for the span's overlapping holds too, the blockers' ids.
    return uow.ledger.lookup_claim(
        req.principal.tenant, prep.key, req.workflow_id, prep.intent_fp, prep.resolved.ids, now,
        span,
    )  # fmt: skip


def _replay(
    uow: UnitOfWork, req: HoldRequest, prep: _Prepared, now: datetime, found: ClaimLookup
) -> Reply | None:
    tenant = req.principal.tenant
    record, live = found.record, found.live
    if record is not None and record.fingerprint == prep.fingerprint:
        return _replayed(record, _status_now(uow, record.hold_id, tenant, now, live))
    if record is not None and (live is None or record.hold_id != live.id):
        return replay_record(record, prep.fingerprint)  # a key reused: refused
    # No record, or the key a step-drift replay answered, sent back: the live
    # hold of this intent answers either way.
    if live is None:
        return None
    first = record if record is not None and record.key == live.key else None
    first = first or uow.ledger.get(tenant, live.key)
    if first is None:  # cannot happen: a hold is written with its record
        return None
    return _replayed(first, live.status_at(now).value)


def _status_now(
    uow: UnitOfWork, hold_id: str | None, tenant: str, now: datetime, live: Hold | None
) -> str | None:
    """A replayed create's hold's status now (the stored answer says ``held``);
    ``live``: the intent's live hold, read already (this one, or another)."""
    if hold_id is None:
        return None
    hold = live if live is not None and live.id == hold_id else uow.holds.get(tenant, hold_id)
    return None if hold is None else hold.status_at(now).value


def replay_record(record: LedgerRecord, fingerprint: str) -> Reply:
    """The stored first answer, or ``idempotency_key_reused`` for another call's key."""
    if record.fingerprint != fingerprint:
        raise ValidationFailed(
            "this Idempotency-Key was already used for a different request",
            code="idempotency_key_reused",
        )
    return _replayed(record)


def _replayed(record: LedgerRecord, hold_status: str | None = None) -> Reply:
    """The stored answer replayed; ``hold_status`` goes in as the reply is made (a
    ``dataclasses.replace`` afterwards costs some microseconds)."""
    return Reply(
        created=record.created, body=record.body, key=public_key(record.key), replayed=True,
        hold_id=record.hold_id, hold_status=hold_status,
    )  # fmt: skip


@dataclass(frozen=True)
class Lookup:
    """What a read learned of a create: its key, and its stored answer if any."""

    key: str
    reply: Reply | None


def lookup_replay(uow: UnitOfWork, req: HoldRequest, policy: Policy, clock: Clock) -> Lookup:
    """Read-only fast path: the key of this call and its stored answer, if any."""
    with uow:
        now = clock.now()
        prep = _prepare(uow, req, policy)
        reply = _replay(uow, req, prep, now, _lookup(uow, req, prep, now))
        if reply is not None:
            reply = replace(reply, workflow_id=req.workflow_id)
        return Lookup(public_key(prep.key), reply)


def place_hold(
    uow: UnitOfWork,
    req: HoldRequest,
    policy: Policy,
    clock: Clock,
    ids: IdGenerator,
    external: ExternalPolicy | None = None,
) -> Reply:
    """Place a hold, replay the first answer, or raise a 4xx :class:`SlotwardError`.

    ``external``: how fresh the attendees' calendars must be (None: not read).
    A stale one raises :class:`NeedsRefresh` before anything is written.
    """
    with uow:
        prep = _prepare(uow, req, policy)  # which attendees: read before locking them
        uow.lock_attendees(req.principal.tenant, prep.resolved.ids, prep.key)
        now = clock.now()  # after the lock: writers that waited for it see fresh time
        with answering_for(public_key(prep.key)):
            reply = _place(uow, req, prep, policy, now, ids, external)
        if reply.workflow_id == req.workflow_id:  # a fresh create's: dataclasses.replace is dear
            return reply
        return replace(reply, workflow_id=req.workflow_id)


def _place(
    uow: UnitOfWork,
    req: HoldRequest,
    prep: _Prepared,
    policy: Policy,
    now: datetime,
    ids: IdGenerator,
    external: ExternalPolicy | None,
) -> Reply:
    found = _lookup(uow, req, prep, now, (req.interval.start, req.interval.end))
    replay = _replay(uow, req, prep, now, found)
    if replay is not None:
        return replay
    check_claimable(prep.key, prep.fingerprint)
    _check_window(req.interval, now, policy.max_hold)
    principal = req.principal
    claim = conflicts.Claim(
        prep.resolved.ids, req.interval.start, req.interval.end, req.priority, prep.intent_fp
    )
    view = external_view(
        uow, principal.tenant, claim.attendees, claim.start, claim.end, now, external,
        bound=found.calendars_bound,
    )  # fmt: skip
    blockers = uow.holds.blocking(principal.tenant, claim.attendees, claim.start, claim.end, now,
                                  overlapping=found.overlapping)  # fmt: skip
    decision = conflicts.decide(claim, blockers, now, view.blocks)
    if isinstance(decision, conflicts.Blocked):
        error = _conflict_error(uow, req, prep, decision, now, policy, view)
        audit(uow, principal.tenant, principal.agent_id, now, "hold.create", prep.key, None,
              "conflict", audit_key=policy.audit_key)  # fmt: skip
        uow.commit()  # the refusal is audited; nothing else of it is stored
        raise error
    span = (claim.start, claim.end)
    expire_stale(uow, principal.tenant, claim.attendees, span, now, ids, audit_key=policy.audit_key)
    hold_id = ids.new_id("hold")
    if isinstance(decision, conflicts.PreemptLosers):
        _preempt(uow, principal, decision.losers, hold_id, now, ids, policy.audit_key)
        reply = _create(uow, req, prep, hold_id, policy, now, ids, view, found)
        return replace(reply, preempted=len(decision.losers))
    return _create(uow, req, prep, hold_id, policy, now, ids, view, found)


def _create(
    uow: UnitOfWork,
    req: HoldRequest,
    prep: _Prepared,
    hold_id: str,
    policy: Policy,
    now: datetime,
    ids: IdGenerator,
    view: ExternalView,
    found: ClaimLookup,
) -> Reply:
    principal = req.principal
    seq = audit(uow, principal.tenant, principal.agent_id, now, "hold.create", prep.key,
                hold_id, "fresh", audit_key=policy.audit_key)  # fmt: skip
    # After the audit head's read: a store that writes at the commit (PostgreSQL)
    # then sends the new attendees with the rest, not in a round trip of their own
    # before that read. Whoever registers an email holds its attendee's lock, or
    # the tenant's (adapters/store/postgres/locks.py): no insert here waits for one.
    uow.directory.register(principal.tenant, prep.resolved.new, now)
    hold = _new_hold(req, prep, hold_id, seq, now)
    uow.holds.add(hold)
    doc = hold_document(hold, now)  # the answer's and the event's
    body = encode_hold({**doc, **view.fields()})
    uow.ledger.add(
        LedgerRecord(
            tenant=principal.tenant, key=prep.key, fingerprint=prep.fingerprint,
            state="succeeded", created=True, body=body, created_at=now,
            expires_at=now + policy.retention, hold_id=hold.id, workflow_id=req.workflow_id,
            tool=TOOL, agent_id=principal.agent_id, completed_at=now,
        )
    )  # fmt: skip
    # Read after the attendees' locks, which share the tenant's lock that a new
    # subscription or binding takes whole: neither can appear before the commit.
    unwatched = not (found.subscribed or found.calendars_bound)
    emit(uow, ids, hold, "hold.created", now, document=doc, unwatched=unwatched)
    uow.commit()
    return Reply(
        created=True, body=body, key=public_key(prep.key), replayed=False, hold_id=hold.id,
        workflow_id=req.workflow_id, attendees=hold.attendees,
    )  # fmt: skip


def _check_window(interval: Interval, now: datetime, max_hold: timedelta) -> None:
    if interval.start < now:
        raise ValidationFailed(
            f"start {format_instant(interval.start)} is in the past",
            code="start_in_past",
            extra={"field": "start"},
        )
    if interval.end - interval.start > max_hold:
        hours = max_hold.total_seconds() / 3600
        raise ValidationFailed(
            f"a hold may last at most {hours:g} hours", code="hold_too_long", extra={"field": "end"}
        )


def _new_hold(req: HoldRequest, prep: _Prepared, hold_id: str, seq: int, now: datetime) -> Hold:
    return Hold(
        id=hold_id,
        key=prep.key,
        tenant=req.principal.tenant,
        workflow_id=req.workflow_id,
        agent_id=req.principal.agent_id,
        attendees=prep.resolved.ids,
        start=req.interval.start,
        end=req.interval.end,
        title=req.title,
        description=req.description,
        priority=req.priority,
        status=HoldStatus.HELD,
        expires_at=now + timedelta(seconds=req.ttl_seconds),
        token=1,
        intent_fp=prep.intent_fp,
        created_at=now,
        updated_at=now,
        audit_seq=seq,
        event_seq=1,  # hold.created
    )


def _preempt(
    uow: UnitOfWork,
    principal: Principal,
    losers: tuple[Hold, ...],
    winner_id: str,
    now: datetime,
    ids: IdGenerator,
    audit_key: AuditKey | None,
) -> None:
    for loser in losers:
        uow.lock_attendees(principal.tenant, loser.attendees)  # its other attendees' too
        moved, _ = apply(loser, Preemption(winner_id), now)
        uow.holds.save(moved)
        audit(
            uow,
            principal.tenant,
            principal.agent_id,
            now,
            "hold.preempt",
            loser.key,
            loser.id,
            "preempted",
            audit_key=audit_key,
        )
        emit(uow, ids, moved, "hold.preempted", now, {"preempted_by": winner_id})


def _conflict_error(
    uow: UnitOfWork,
    req: HoldRequest,
    prep: _Prepared,
    decision: conflicts.Blocked,
    now: datetime,
    policy: Policy,
    view: ExternalView,
) -> SlotConflict:
    interval = req.interval
    tenant = req.principal.tenant

    def busy(lo: datetime, hi: datetime) -> list[conflicts.Span]:
        # The spans only, not the holds: a busy calendar has hundreds of them
        # over the horizon, and reading each whole was most of a refusal.
        spans = uow.holds.blocking_spans(tenant, prep.resolved.ids, lo, hi, now)
        return [*spans, *((b.start, b.end) for b in blocks_between(uow, tenant, view, lo, hi))]

    alternatives = conflicts.nearest_free(
        busy,
        start=interval.start,
        duration=interval.end - interval.start,
        now=now,
        count=policy.alternatives,
        horizon=policy.max_window,
    )
    kinds = sorted({c["kind"] for c in decision.conflicts})
    error = SlotConflict(
        f"the slot is taken ({', '.join(kinds)}) for at least one attendee",
        retryable=decision.retry_after is not None,
        retry_after=decision.retry_after,
        extra={
            "conflicts": list(decision.conflicts),
            "alternatives": [
                {"start": format_instant(s), "end": format_instant(e)} for s, e in alternatives
            ],
            **view.fields(),
        },
    )
    return error
