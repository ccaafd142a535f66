"""Read-side use cases: holds, availability and the audit log."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from slotward.engine.errors import NotFound, ValidationFailed
from slotward.engine.model import HoldStatus, Principal
from slotward.engine.ports import UnitOfWork
from slotward.engine.rules.attendees import AttendeeRef, ResolvedAttendees, resolve_attendees
from slotward.engine.rules.audit import AuditKey, check_chain
from slotward.engine.rules.checkpoints import Checkpoint, read_checkpoint
from slotward.engine.rules.conflicts import free_slots, merge_intervals
from slotward.engine.rules.documents import audit_document, hold_document
from slotward.engine.rules.external import ExternalPolicy
from slotward.engine.rules.policy import Policy
from slotward.engine.rules.timenorm import format_instant
from slotward.engine.usecases.external import external_view

__all__ = [
    "AvailabilityQuery",
    "availability",
    "check_window",
    "get_hold",
    "list_audit",
    "list_holds",
    "resolve_for_reading",
    "verify_audit",
    "verify_tenant",
]


def get_hold(uow: UnitOfWork, principal: Principal, hold_id: str, now: datetime) -> dict[str, Any]:
    with uow:
        hold = uow.holds.get(principal.tenant, hold_id)
    if hold is None:
        raise NotFound(f"no hold {hold_id!r}", code="hold_not_found")
    return hold_document(hold, now)


def list_holds(
    uow: UnitOfWork,
    principal: Principal,
    *,
    workflow_id: str | None,
    statuses: Collection[HoldStatus] | None,
    attendee: AttendeeRef | None,
    cursor: str | None,
    limit: int,
    now: datetime,
) -> dict[str, Any]:
    """One page of the tenant's holds, oldest first; ``next_cursor`` is the last id."""
    with uow:
        ids = resolve_for_reading(uow, principal.tenant, (attendee,)).ids if attendee else ()
        holds = uow.holds.search(
            principal.tenant,
            workflow_id=workflow_id,
            statuses=statuses,
            attendee=ids[0] if ids else None,
            after_id=cursor,
            limit=limit + 1,
            now=now,
        )
    page = holds[:limit]
    more = len(holds) > limit
    return {
        "items": [hold_document(h, now) for h in page],
        "next_cursor": page[-1].id if more and page else None,
    }


@dataclass(frozen=True)
class AvailabilityQuery:
    principal: Principal
    attendees: tuple[AttendeeRef, ...]
    start: datetime
    end: datetime
    duration: timedelta | None = None
    limit: int = 5


def availability(
    uow: UnitOfWork,
    query: AvailabilityQuery,
    policy: Policy,
    now: datetime,
    external: ExternalPolicy | None = None,
) -> dict[str, Any]:
    """Busy intervals of the attendees, the free gaps, and (with a duration) free slots.

    Bound attendees' external busy time counts (kind ``external``), read as a
    claim reads it (``external``: a stale mirror raises NeedsRefresh).
    """
    check_window(query.start, query.end, policy)
    tenant = query.principal.tenant
    with uow:
        resolved = resolve_for_reading(uow, tenant, query.attendees)
        holds = uow.holds.blocking(tenant, resolved.ids, query.start, query.end, now)
        view = external_view(uow, tenant, resolved.ids, query.start, query.end, now, external)
    wanted = set(resolved.ids)
    busy = [
        {
            "attendee": attendee,
            "start": format_instant(h.start),
            "end": format_instant(h.end),
            "kind": "committed" if h.status is HoldStatus.COMMITTED else "held",
        }
        for h in sorted(holds, key=lambda h: (h.start, h.id))
        for attendee in h.attendees
        if attendee in wanted
    ]
    if view.blocks:
        outside = [
            {"attendee": b.attendee, "start": format_instant(b.start),
             "end": format_instant(b.end), "kind": "external"}
            for b in view.blocks
        ]  # fmt: skip
        busy = sorted(busy + outside, key=lambda i: (i["start"], i["attendee"], i["kind"]))
    intervals = [(h.start, h.end) for h in holds] + [(b.start, b.end) for b in view.blocks]
    result: dict[str, Any] = {
        "attendees": list(resolved.ids),
        "from": format_instant(query.start),
        "to": format_instant(query.end),
        "busy": busy,
        "free": [
            {"start": format_instant(s), "end": format_instant(e)}
            for s, e in _gaps(merge_intervals(intervals), query.start, query.end)
        ],
    }
    if query.duration is not None:
        slots = free_slots(
            intervals, start=query.start, end=query.end, duration=query.duration,
            now=now, count=query.limit,
        )  # fmt: skip
        result["slots"] = [{"start": format_instant(s), "end": format_instant(e)} for s, e in slots]
    result.update(view.fields())
    return result


def check_window(start: datetime, end: datetime, policy: Policy) -> None:
    """A read window: ``end`` after ``start``, at most the policy's longest window."""
    if end <= start:
        raise ValidationFailed("'to' must be after 'from'", code="invalid_interval")
    if end - start > policy.max_window:
        raise ValidationFailed(
            f"the window may span at most {policy.max_window.days} days", code="window_too_long"
        )


def resolve_for_reading(
    uow: UnitOfWork, tenant: str, refs: Sequence[AttendeeRef]
) -> ResolvedAttendees:
    """Attendee ids for reading: unknown emails map to their would-be ids."""
    emails = [a.value for a in refs if a.kind == "email"]
    ids = [a.value for a in refs if a.kind == "id"]
    directory, known = uow.directory.lookup(tenant, emails, ids)
    return resolve_attendees(tenant, refs, directory=directory, known_ids=known, allow_unknown=True)


def _gaps(
    busy: list[tuple[datetime, datetime]], start: datetime, end: datetime
) -> list[tuple[datetime, datetime]]:
    gaps, cursor = [], start
    for s, e in busy:
        if s > cursor:
            gaps.append((cursor, min(s, end)))
        cursor = max(cursor, e)
    if cursor < end:
        gaps.append((cursor, end))
    return [(s, e) for s, e in gaps if s < e]


def list_audit(uow: UnitOfWork, principal: Principal, *, after: int, limit: int) -> dict[str, Any]:
    with uow:
        entries = uow.audit.entries(principal.tenant, after, limit + 1)
    page = entries[:limit]
    more = len(entries) > limit
    return {
        "items": [audit_document(e) for e in page],
        "next_cursor": str(page[-1].seq) if more and page else None,
    }


def verify_audit(
    uow: UnitOfWork,
    principal: Principal,
    batch: int = 5000,
    *,
    audit_key: AuditKey | None = None,
    checkpoint: str | None = None,
) -> dict[str, Any]:
    """Walk the tenant's whole chain and recompute every hash (engine/rules/audit.py).

    With ``checkpoint`` (signed by ``slotward audit checkpoint``), the chain
    must also hold the checkpoint's entry and be keyed after it: a tail
    deleted behind it, head and all, shows there. A checkpoint that is
    malformed, forged or another tenant's is refused (ValidationFailed) before anything is read.
    """
    points = (
        [] if checkpoint is None else [read_checkpoint(checkpoint, audit_key, principal.tenant)]
    )
    with uow:
        return verify_tenant(uow, principal.tenant, audit_key, points, batch)


def verify_tenant(
    uow: UnitOfWork,
    tenant: str,
    audit_key: AuditKey | None,
    checkpoints: Sequence[Checkpoint] = (),
    batch: int = 5000,
) -> dict[str, Any]:
    """The verification document of one tenant's chain, inside the caller's transaction.

    ``{"ok", "count", "head"}``, with ``broken_at`` and ``reason`` when not
    ok; with a key, ``keyed`` and ``keyed_from`` (the first keyed seq); with
    checkpoints, ``checkpoint``: ``ok`` or ``failed``.
    """
    pins: dict[int, str] = {}
    clash = False
    for point in checkpoints:
        clash = clash or pins.setdefault(point.seq, point.hash) != point.hash
    check = check_chain(uow.audit, tenant, audit_key, pins, batch=batch)
    doc: dict[str, Any] = {"ok": check.ok and not clash, "count": check.count, "head": check.head}
    if not check.ok:
        doc.update(broken_at=check.broken_at, reason=check.reason)
    elif clash:  # two signed checkpoints disagree: the key was used on two chains
        doc.update(broken_at=min(pins), reason="checkpoint")
    if audit_key is not None:
        doc.update(keyed=True, keyed_from=check.keyed_from)
    if checkpoints:
        reached = check.ok or (check.broken_at is not None and check.broken_at > max(pins))
        doc["checkpoint"] = "ok" if reached and not clash else "failed"
    return doc
