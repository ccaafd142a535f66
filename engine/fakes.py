"""In-memory implementations of the ports, for unit tests and for embedding.

They keep the same contract as the SQL stores, which tests/contract/ runs over
all three: a unit of work rolls back unless committed, expired holds never
block, a key is stored once, lists come in the SQL stores' order (a tenant's
holds by id, overlapping ones by start then id, the overdue by expiry then id).
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime
from types import TracebackType
from typing import Any, TypeVar

from slotward.engine.approvals import Approval, ApprovalRules, DirectoryEntry, Session
from slotward.engine.calendars import BusyBlock, CalendarBinding, CalendarWrite
from slotward.engine.fake_approvals import FakeApprovals, FakeSessions
from slotward.engine.fake_calendars import FakeCalendars, FakeCalendarWrites, FakeMirror
from slotward.engine.fake_ledger import FakeLedger
from slotward.engine.fake_ops import FakeKeys, FakeStats, FakeWorkflows
from slotward.engine.fake_relay import FakeDeliveries, FakeLeases, FakeOutbox, FakeWebhooks
from slotward.engine.model import (
    Attempt,
    AuditEntry,
    Delivery,
    Hold,
    HoldStatus,
    LedgerRecord,
    OutboxEvent,
    Principal,
    Subscription,
    WorkflowStats,
)
from slotward.engine.ports import UnitOfWork
from slotward.engine.rules.audit import GENESIS

__all__ = ["InMemoryStore", "InMemoryUnitOfWork", "SequentialIds", "State"]

T = TypeVar("T")


@dataclass
class State:
    holds: dict[tuple[str, str], Hold] = field(default_factory=dict)
    ledger: dict[tuple[str, str], LedgerRecord] = field(default_factory=dict)
    emails: dict[tuple[str, str], str] = field(default_factory=dict)
    attendees: dict[tuple[str, str], str | None] = field(default_factory=dict)
    audit: dict[str, list[AuditEntry]] = field(default_factory=dict)
    outbox: list[OutboxEvent] = field(default_factory=list)
    keys: dict[str, Principal] = field(default_factory=dict)
    key_ids: dict[str, str] = field(default_factory=dict)  # key id -> its hash
    revoked: dict[str, str] = field(default_factory=dict)  # id -> hash, kept for good as in SQL
    workflows: dict[tuple[str, str], WorkflowStats] = field(default_factory=dict)
    # (tenant, workflow_id, whole second) -> replays in it, as the workflow_replays table
    replay_seconds: dict[tuple[str, str, datetime], int] = field(default_factory=dict)
    webhooks: dict[str, Subscription] = field(default_factory=dict)  # by id, ids are global
    deliveries: dict[str, Delivery] = field(default_factory=dict)
    attempts: dict[str, list[Attempt]] = field(default_factory=dict)  # by delivery id
    leases: dict[str, tuple[str, datetime]] = field(default_factory=dict)  # name -> owner, until
    bindings: dict[tuple[str, str], CalendarBinding] = field(default_factory=dict)  # (t, attendee)
    busy: dict[tuple[str, str], list[BusyBlock]] = field(default_factory=dict)  # the mirror
    # (tenant, hold_id, attendee) -> what its event should be in that calendar
    calendar_writes: dict[tuple[str, str, str], CalendarWrite] = field(default_factory=dict)
    approvals: dict[tuple[str, str], Approval] = field(default_factory=dict)  # (tenant, id)
    # tenant -> its approval policy, when it was set and by whom
    approval_rules: dict[str, tuple[ApprovalRules, datetime, str]] = field(default_factory=dict)
    sessions: dict[str, Session] = field(default_factory=dict)  # by the token's hash


class _Holds:
    def __init__(self, state: Callable[[], State]) -> None:
        self._state = state

    def get(self, tenant: str, hold_id: str) -> Hold | None:
        return self._state().holds.get((tenant, hold_id))

    def _of(self, tenant: str) -> list[Hold]:
        return sorted((h for (t, _), h in self._state().holds.items() if t == tenant), key=_id)

    def blocking(
        self,
        tenant: str,
        attendees: Collection[str],
        start: datetime,
        end: datetime,
        now: datetime,
        *,
        overlapping: Collection[str] | None = None,
    ) -> list[Hold]:
        wanted = set(attendees)
        found = [
            h
            for h in self._of(tenant)
            if h.blocks_at(now) and h.start < end and h.end > start and wanted & set(h.attendees)
            and (overlapping is None or h.id in overlapping)
        ]  # fmt: skip
        return sorted(found, key=_start_id)

    def blocking_spans(
        self, tenant: str, attendees: Collection[str], start: datetime, end: datetime, now: datetime
    ) -> list[tuple[datetime, datetime]]:
        return sorted((h.start, h.end) for h in self.blocking(tenant, attendees, start, end, now))

    def stale(
        self, tenant: str, attendees: Collection[str], start: datetime, end: datetime, now: datetime
    ) -> list[Hold]:
        wanted = set(attendees)
        found = [
            h
            for h in self._of(tenant)
            if h.status is HoldStatus.HELD
            and h.expires_at <= now
            and h.start < end
            and h.end > start
            and wanted & set(h.attendees)
        ]
        return sorted(found, key=_start_id)

    def window(
        self, tenant: str, start: datetime, end: datetime, earliest_start: datetime, limit: int
    ) -> list[Hold]:
        found = [
            h
            for h in self._of(tenant)
            if h.start < end and h.end > start and h.start >= earliest_start
        ]
        return sorted(found, key=_start_id)[:limit]

    def add(self, hold: Hold) -> None:
        holds = self._state().holds
        if any(hold_id == hold.id for _, hold_id in holds):  # ids are the store's keys
            raise KeyError(f"duplicate hold id {hold.id}")
        holds[(hold.tenant, hold.id)] = hold

    def save(self, hold: Hold) -> None:
        holds = self._state().holds
        stored = holds.get((hold.tenant, hold.id))
        if stored is not None:  # only the mutable fields are written back, as in SQL
            holds[(hold.tenant, hold.id)] = replace(stored, **_fields(hold, _HOLD_MUTABLE))

    def due_for_expiry(self, now: datetime, limit: int) -> list[Hold]:
        due = [
            h
            for h in self._state().holds.values()
            if h.status is HoldStatus.HELD and h.expires_at <= now
        ]
        return sorted(due, key=lambda h: (h.expires_at, h.id))[:limit]  # oldest overdue first

    def search(
        self,
        tenant: str,
        *,
        workflow_id: str | None,
        statuses: Collection[HoldStatus] | None,
        attendee: str | None,
        after_id: str | None,
        limit: int,
        now: datetime,
    ) -> list[Hold]:
        found = (
            h
            for h in self._of(tenant)
            if (workflow_id is None or h.workflow_id == workflow_id)
            and (statuses is None or h.status_at(now) in statuses)
            and (attendee is None or attendee in h.attendees)
            and (after_id is None or h.id > after_id)
        )
        return list(itertools.islice(found, limit))


_HOLD_MUTABLE = (
    "status", "token", "expires_at", "updated_at", "committed_at", "preempted_by", "event_seq"
)  # fmt: skip


def _fields(value: object, names: Collection[str]) -> dict[str, Any]:
    return {name: getattr(value, name) for name in names}


def _id(hold: Hold) -> str:
    return hold.id


def _start_id(hold: Hold) -> tuple[datetime, str]:
    """The order of overlapping holds, as the SQL stores list them."""
    return hold.start, hold.id


class _Directory:
    def __init__(self, state: Callable[[], State]) -> None:
        self._state = state

    def lookup(
        self, tenant: str, emails: Collection[str], ids: Collection[str]
    ) -> tuple[dict[str, str], set[str]]:
        state = self._state()
        found = {e: state.emails[(tenant, e)] for e in emails if (tenant, e) in state.emails}
        return found, {i for i in ids if (tenant, i) in state.attendees}

    def register(self, tenant: str, pairs: Sequence[tuple[str, str]], now: datetime) -> None:
        state = self._state()
        for attendee_id, email in pairs:
            state.attendees.setdefault((tenant, attendee_id), None)
            state.emails.setdefault((tenant, email), attendee_id)

    def put(
        self, tenant: str, attendee_id: str, name: str | None, emails: Sequence[str], now: datetime
    ) -> None:
        state = self._state()
        state.attendees[(tenant, attendee_id)] = name
        for email in emails:
            state.emails[(tenant, email)] = attendee_id

    def entries(self, tenant: str, ids: Collection[str]) -> list[DirectoryEntry]:
        state = self._state()
        known = sorted({i for i in ids if (tenant, i) in state.attendees})
        return [
            DirectoryEntry(
                i,
                state.attendees[(tenant, i)],
                tuple(sorted(e for (t, e), a in state.emails.items() if t == tenant and a == i)),
            )
            for i in known
        ]


class _Audit:
    def __init__(self, state: Callable[[], State]) -> None:
        self._state = state

    def head(self, tenant: str) -> tuple[int, str]:
        chain = self._state().audit.get(tenant, [])
        return (chain[-1].seq, chain[-1].hash) if chain else (0, GENESIS)

    def append(self, entry: AuditEntry) -> None:
        chain = self._state().audit.setdefault(entry.tenant, [])
        late = chain and entry.seq <= chain[-1].seq  # (tenant, seq) is the store's key
        if late and any(e.seq == entry.seq for e in chain):
            raise KeyError(f"duplicate audit seq {entry.seq}")
        chain.append(entry)

    def entries(self, tenant: str, after_seq: int, limit: int) -> list[AuditEntry]:
        chain = self._state().audit.get(tenant, [])
        return [e for e in chain if e.seq > after_seq][:limit]

    def tenants(self) -> list[str]:
        return sorted(t for t, chain in self._state().audit.items() if chain)


class InMemoryUnitOfWork:
    """A transaction over :class:`State`: a working copy, swapped in on commit."""

    def __init__(self, state: State) -> None:
        self.committed = state
        self._work: State | None = None
        self.holds = _Holds(self._current)
        self.ledger = FakeLedger(self._current)
        self.directory = _Directory(self._current)
        self.audit = _Audit(self._current)
        self.outbox = FakeOutbox(self._current)
        self.deliveries = FakeDeliveries(self._current)
        self.webhooks = FakeWebhooks(self._current)
        self.leases = FakeLeases(self._current)
        self.calendars = FakeCalendars(self._current)
        self.mirror = FakeMirror(self._current)
        self.calendar_writes = FakeCalendarWrites(self._current)
        self.keys = FakeKeys(self._current)
        self.workflows = FakeWorkflows(self._current)
        self.stats = FakeStats(self._current)
        self.approvals = FakeApprovals(self._current)
        self.sessions = FakeSessions(self._current)

    def _current(self) -> State:
        if self._work is None:
            raise RuntimeError("use the unit of work inside 'with uow:', before its commit")
        return self._work

    def __enter__(self) -> InMemoryUnitOfWork:
        self._work = copy.deepcopy(self.committed)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._work = None

    def lock_tenant(self, tenant: str) -> None:
        self._current()  # one transaction at a time already: only check we are in one

    def lock_attendees(
        self, tenant: str, attendees: Collection[str], key: str | None = None
    ) -> None:
        self._current()  # as lock_tenant: one transaction at a time already

    def lock_part(self, tenants: Collection[str], part: str) -> None:
        self._current()  # as lock_tenant: one transaction at a time already

    def commit(self) -> None:
        """Keep the work, and end it: the unit of work does nothing more until entered again.

        Nothing is done after a commit by any use case, and the SQL stores do
        not agree on what that would mean (SQLite alone autocommits it, grouped
        it keeps it in a savepoint, PostgreSQL drops it), so here it is refused.
        """
        work = self._current()
        for name in vars(work):
            setattr(self.committed, name, getattr(work, name))
        self._work = None


class InMemoryStore:
    """Runs use cases one at a time against one shared :class:`State`."""

    def __init__(self) -> None:
        self.state = State()

    async def write(self, fn: Callable[[UnitOfWork], T]) -> T:
        return fn(InMemoryUnitOfWork(self.state))

    async def read(self, fn: Callable[[UnitOfWork], T]) -> T:
        return fn(InMemoryUnitOfWork(self.state))

    async def close(self) -> None:
        return None


class SequentialIds:
    """Predictable ids for tests: ``hold_000001``, ``evt_000002`` ..."""

    def __init__(self) -> None:
        self._counter = itertools.count(1)

    def new_id(self, prefix: str) -> str:
        return f"{prefix}_{next(self._counter):06d}"
