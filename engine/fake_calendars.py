"""In-memory calendar bindings, their mirror and the calendar writes.

The providers' side of engine/fakes.py, as adapters/store/calendar_repos.py
is the SQL store's: the same contract (tests/contract runs both), the same
orders (bindings by attendee, claims soonest first then by key, busy blocks
by start, attendee, source and end).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING

from slotward.engine.calendars import BusyBlock, CalendarBinding, CalendarWrite

if TYPE_CHECKING:  # fakes.py imports this module
    from slotward.engine.fakes import State

__all__ = ["FakeCalendarWrites", "FakeCalendars", "FakeMirror"]


def _sync_key(binding: CalendarBinding) -> tuple[bool, datetime | None, str, str]:
    """Soonest first: never read before any planned read, as the SQL stores order them."""
    planned = binding.next_sync_at is not None
    return planned, binding.next_sync_at, binding.tenant, binding.attendee


class FakeCalendars:
    def __init__(self, state: Callable[[], State]) -> None:
        self._state = state

    def put(self, binding: CalendarBinding) -> None:
        state = self._state()
        key = (binding.tenant, binding.attendee)
        state.bindings[key] = binding
        state.busy.pop(key, None)  # what the old calendar was busy with is not this one's

    def get(self, tenant: str, attendee: str) -> CalendarBinding | None:
        return self._state().bindings.get((tenant, attendee))

    def for_attendees(self, tenant: str, attendees: Collection[str]) -> list[CalendarBinding]:
        bindings = self._state().bindings
        found = (bindings.get((tenant, a)) for a in sorted(set(attendees)))
        return [b for b in found if b is not None]

    def remove(self, tenant: str, attendee: str) -> bool:
        state = self._state()
        state.busy.pop((tenant, attendee), None)
        return state.bindings.pop((tenant, attendee), None) is not None

    def store_sync(self, binding: CalendarBinding, expected_version: int) -> bool:
        bindings = self._state().bindings
        key = (binding.tenant, binding.attendee)
        stored = bindings.get(key)
        if stored is None or stored.version != expected_version:
            return False
        if stored.updated_at != binding.updated_at:  # a re-PUT's binding: another one
            return False
        bindings[key] = replace(
            stored,
            status=binding.status,
            synced_at=binding.synced_at,
            covers_from=binding.covers_from,
            covers_until=binding.covers_until,
            cursor=binding.cursor,
            version=binding.version,
            error=binding.error,
            error_at=binding.error_at,
            failures=binding.failures,
            next_sync_at=binding.next_sync_at,
            sync_owner=binding.sync_owner,
            sync_until=binding.sync_until,
        )
        return True

    def claim_due(
        self, owner: str, now: datetime, until: datetime, limit: int
    ) -> list[CalendarBinding]:
        bindings = self._state().bindings
        due = sorted(
            (
                b for b in bindings.values()
                if (b.next_sync_at is None or b.next_sync_at <= now)
                and (b.sync_until is None or b.sync_until <= now)
            ),
            key=_sync_key,
        )[:limit]  # fmt: skip
        claimed = [replace(b, sync_owner=owner, sync_until=until) for b in due]
        for b in claimed:
            bindings[(b.tenant, b.attendee)] = b
        return claimed


def _block_key(block: BusyBlock) -> tuple[datetime, str, str, datetime]:
    return block.start, block.attendee, block.source, block.end


class FakeMirror:
    def __init__(self, state: Callable[[], State]) -> None:
        self._state = state

    def replace(self, tenant: str, attendee: str, blocks: Sequence[BusyBlock]) -> None:
        self._state().busy[(tenant, attendee)] = [
            replace(b, tenant=tenant, attendee=attendee) for b in blocks
        ]

    def patch(
        self,
        tenant: str,
        attendee: str,
        changed: Mapping[str, Sequence[BusyBlock]],
        removed: Collection[str],
    ) -> None:
        busy = self._state().busy
        gone = set(changed) | set(removed)
        kept = [b for b in busy.get((tenant, attendee), []) if b.source not in gone]
        for source, blocks in changed.items():  # a block is its source's, whatever it says
            kept.extend(replace(b, tenant=tenant, attendee=attendee, source=source) for b in blocks)
        busy[(tenant, attendee)] = kept

    def overlapping(
        self, tenant: str, attendees: Collection[str], start: datetime, end: datetime
    ) -> list[BusyBlock]:
        busy = self._state().busy
        found = [
            b
            for a in set(attendees)
            for b in busy.get((tenant, a), [])
            if b.start < end and b.end > start
        ]
        return sorted(found, key=_block_key)


def _due_key(write: CalendarWrite) -> tuple[datetime, str, str, str]:
    return (write.next_attempt_at, *write.key)


class FakeCalendarWrites:
    def __init__(self, state: Callable[[], State]) -> None:
        self._state = state

    def enqueue(self, writes: Sequence[CalendarWrite]) -> None:
        stored = self._state().calendar_writes
        for write in writes:
            old = stored.get(write.key)
            if old is None:
                stored[write.key] = write
            elif write.version > old.version:  # a newer state; the claim stays its holder's
                stored[write.key] = replace(
                    write,
                    state="pending",
                    attempts=0,
                    claim_owner=old.claim_owner,
                    claim_until=old.claim_until,
                )

    def claim(self, owner: str, now: datetime, until: datetime, limit: int) -> list[CalendarWrite]:
        stored = self._state().calendar_writes
        due = sorted(
            (
                w for w in stored.values()
                if w.state == "pending" and w.next_attempt_at <= now
                and (w.claim_until is None or w.claim_until <= now)
            ),
            key=_due_key,
        )[:limit]  # fmt: skip
        claimed = [replace(w, claim_owner=owner, claim_until=until) for w in due]
        for w in claimed:
            stored[w.key] = w
        return claimed

    def get_many(self, keys: Collection[tuple[str, str, str]]) -> list[CalendarWrite]:
        stored = self._state().calendar_writes
        found = (stored.get(k) for k in sorted(set(keys)))
        return [w for w in found if w is not None]

    def save_many(self, writes: Sequence[CalendarWrite]) -> None:
        stored = self._state().calendar_writes
        for write in writes:
            old = stored.get(write.key)
            # Only the mutable fields are written back, and only to the version
            # read, as in SQL: a newer one enqueued meanwhile stays as it is.
            if old is not None and old.version == write.version:
                stored[write.key] = replace(
                    old,
                    state=write.state,
                    attempts=write.attempts,
                    next_attempt_at=write.next_attempt_at,
                    claim_owner=write.claim_owner,
                    claim_until=write.claim_until,
                    written_at=write.written_at,
                    last_error=write.last_error,
                )

    def counts(self, tenant: str, attendee: str) -> dict[str, int]:
        found: dict[str, int] = {}
        for (t, _, a), w in self._state().calendar_writes.items():
            if t == tenant and a == attendee:
                found[w.state] = found.get(w.state, 0) + 1
        return found

    def remove_for_attendee(self, tenant: str, attendee: str) -> int:
        stored = self._state().calendar_writes
        gone = [k for k in stored if k[0] == tenant and k[2] == attendee]
        for k in gone:
            del stored[k]
        return len(gone)

    def revive(self, tenant: str, attendee: str, now: datetime) -> int:
        stored = self._state().calendar_writes
        dead = [k for k, w in stored.items() if k[0] == tenant and k[2] == attendee
                and w.state == "dead"]  # fmt: skip
        for k in dead:
            stored[k] = replace(stored[k], state="pending", attempts=0, next_attempt_at=now,
                                claim_owner=None, claim_until=None, updated_at=now)  # fmt: skip
        return len(dead)

    def purge_written(self, before: datetime, limit: int) -> int:
        stored = self._state().calendar_writes
        old = sorted(
            (
                (w.written_at, w.key) for w in stored.values()
                if w.state == "delivered" and w.action == "delete"
                and w.written_at is not None and w.written_at < before
            ),
        )[:limit]  # fmt: skip
        for _, key in old:
            del stored[key]
        return len(old)
