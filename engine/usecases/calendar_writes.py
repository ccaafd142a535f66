"""Use cases of slotward's own events in the bound calendars: fan out, claim, record.

The relay fans each hold event out into the writes of its bound attendees
(:func:`fan_out_writes`, inside the relay's transaction: the outbox is the
one way out). A write is one row per hold and attendee that a later event
replaces, so the provider writer always converges on the hold's latest state.
The writer claims due writes (:func:`claim_writes`), carries them out with
nothing of the store held, and records what happened (:func:`record_writes`):
written, again later by the relay's schedule, or dead. A writer killed in
between leaves its claims to run out; the next one writes again, and the
event's UID makes that harmless (a put finds its event, a delete finds none).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from slotward.engine.calendars import CalendarBinding, CalendarWrite
from slotward.engine.model import OutboxEvent
from slotward.engine.ports import Clock, UnitOfWork
from slotward.engine.rules.calendar_events import WRITE_EVENTS, write_for_event
from slotward.engine.rules.delivery import Outcome, RelaySettings, next_attempt

__all__ = [
    "WriteResult",
    "WritesRecorded",
    "claim_writes",
    "fan_out_writes",
    "purge_written",
    "record_writes",
]


@dataclass(frozen=True)
class WriteResult:
    """What one attempt of a claimed write got."""

    key: tuple[str, str, str]  # (tenant, hold, attendee)
    version: int  # the version that was written: a newer one stays pending
    at: datetime
    outcome: Outcome


@dataclass
class WritesRecorded:
    written: int = 0
    failed: int = 0  # to be tried again
    dead: int = 0
    superseded: int = 0  # a newer state arrived while it was written


def fan_out_writes(
    uow: UnitOfWork, events: Sequence[OutboxEvent], now: datetime, writable: Collection[str]
) -> int:
    """The calendar writes ``events`` ask for; return how many were queued.

    Only to attendees bound to a provider named in ``writable`` (those whose
    capabilities say they write). Runs in the relay's transaction, under the
    events' tenants' locks; one read of the bindings per tenant.
    """
    if not writable:
        return 0
    wanted: dict[str, set[str]] = {}
    for event in events:
        doc = event.payload.get("hold")
        if event.type in WRITE_EVENTS and isinstance(doc, dict):
            wanted.setdefault(event.tenant, set()).update(str(a) for a in doc.get("attendees", ()))
    bound: dict[str, list[CalendarBinding]] = {
        tenant: [b for b in uow.calendars.for_attendees(tenant, sorted(attendees))
                 if b.provider in writable]
        for tenant, attendees in wanted.items()
    }  # fmt: skip
    writes = []
    for event in events:
        doc = event.payload.get("hold")
        if not isinstance(doc, dict):
            continue
        attendees = set(doc.get("attendees", ()))
        for binding in bound.get(event.tenant, ()):
            if binding.attendee in attendees:
                write = write_for_event(event, binding.attendee, now)
                if write is not None:
                    writes.append(write)
    if writes:
        uow.calendar_writes.enqueue(_latest(writes))
    return len(writes)


def _latest(writes: list[CalendarWrite]) -> list[CalendarWrite]:
    """One write per hold and attendee: the highest version (a batch may hold several)."""
    best: dict[tuple[str, str, str], CalendarWrite] = {}
    for write in writes:
        if write.key not in best or write.version > best[write.key].version:
            best[write.key] = write
    return list(best.values())


def claim_writes(
    uow: UnitOfWork, clock: Clock, owner: str, lease: timedelta, limit: int
) -> list[tuple[CalendarWrite, CalendarBinding]]:
    """Claim up to ``limit`` due writes for ``owner``, each with its binding.

    A write whose binding is gone (unbound meanwhile) is not returned.

    No tenant lock: a claim marks writes for one writer; no decision or chain
    of a tenant reads the claim.
    """
    with uow:
        now = clock.now()
        claimed = uow.calendar_writes.claim(owner, now, now + lease, limit)
        by_tenant: dict[str, set[str]] = {}
        for write in claimed:
            by_tenant.setdefault(write.tenant, set()).add(write.attendee)
        bindings = {
            (b.tenant, b.attendee): b
            for tenant, attendees in sorted(by_tenant.items())
            for b in uow.calendars.for_attendees(tenant, sorted(attendees))
        }
        uow.commit()
        return [
            (w, bindings[(w.tenant, w.attendee)])
            for w in claimed
            if (w.tenant, w.attendee) in bindings
        ]


def record_writes(
    uow: UnitOfWork,
    clock: Clock,
    owner: str,
    results: Sequence[WriteResult],
    settings: RelaySettings,
    rand: Callable[[], float],
) -> WritesRecorded:
    """Record what each claimed write got.

    A write whose row moved on to a newer version meanwhile stays pending for
    that version (its claim cleared, due now). A failure waits by the relay's
    schedule; past its last attempt the write is dead.

    The results' tenants are locked first, in order, as the relay's fan-out
    locks its events' tenants: a newer version enqueued between this read and
    this save (PostgreSQL reads committed data) would otherwise be saved as
    delivered when only the older one was written.
    """
    done = WritesRecorded()
    with uow:
        for tenant in sorted({r.key[0] for r in results}):
            uow.lock_tenant(tenant)
        now = clock.now()
        found = {w.key: w for w in uow.calendar_writes.get_many([r.key for r in results])}
        moved = []
        for result in results:
            write = found.get(result.key)
            if write is None or write.state != "pending":
                continue  # unbound meanwhile, or settled by another writer
            if write.claim_owner not in (None, owner):
                continue  # our claim ran out and another writer has it now
            moved.append(_moved(write, result, now, settings, rand, done))
        uow.calendar_writes.save_many(moved)
        uow.commit()
    return done


def _moved(
    write: CalendarWrite,
    result: WriteResult,
    now: datetime,
    settings: RelaySettings,
    rand: Callable[[], float],
    done: WritesRecorded,
) -> CalendarWrite:
    free = replace(write, claim_owner=None, claim_until=None, updated_at=now)
    if write.version != result.version:
        done.superseded += 1
        return replace(free, next_attempt_at=now)
    if result.outcome.ok:
        done.written += 1
        return replace(free, state="delivered", written_at=now, last_error=None,
                       attempts=write.attempts + 1)  # fmt: skip
    tried = write.attempts + 1
    error = result.outcome.error or f"HTTP {result.outcome.status}"
    retry = next_attempt(settings, tried, now, result.outcome.retry_after, rand)
    if retry is None:
        done.dead += 1
        return replace(free, state="dead", attempts=tried, last_error=error)
    done.failed += 1
    return replace(free, attempts=tried, next_attempt_at=retry, last_error=error)


def purge_written(uow: UnitOfWork, clock: Clock, retention: timedelta, limit: int) -> int:
    """Delete up to ``limit`` writes of holds that are over, written longer than
    ``retention`` ago.

    No tenant lock: a delivered delete is settled for good; nothing reads it again.
    """
    with uow:
        purged = uow.calendar_writes.purge_written(clock.now() - retention, limit)
        uow.commit()
        return purged
