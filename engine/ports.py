"""Ports: what the engine needs from the outside world, as protocols.

Use cases are plain synchronous functions over a :class:`UnitOfWork`. The store
runs a whole use case in one go (on SQLite: one hop to its writer thread; on a
server database: one connection), so a transaction costs one thread hop, not
one per statement. ``async`` lives only at the :class:`Store` boundary.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from datetime import datetime
from types import TracebackType
from typing import Protocol, TypeVar

from slotward.engine.approval_ports import Approvals, Sessions
from slotward.engine.approvals import DirectoryEntry
from slotward.engine.ledger_ports import ClaimLookup, Ledger, ReplayState
from slotward.engine.model import (
    AuditEntry,
    Hold,
    HoldStatus,
    Principal,
)
from slotward.engine.ops_ports import Stats, Workflows
from slotward.engine.outbox_ports import Deliveries, Leases, Outbox, Webhooks
from slotward.engine.provider_ports import CalendarProvider, Calendars, CalendarWrites, Mirror

__all__ = [
    "ApiKeys",
    "Approvals",
    "AuditLog",
    "CalendarProvider",
    "CalendarWrites",
    "Calendars",
    "ClaimLookup",
    "Clock",
    "Deliveries",
    "Directory",
    "HoldRepository",
    "IdGenerator",
    "Leases",
    "Ledger",
    "Mirror",
    "Outbox",
    "ReplayState",
    "Sessions",
    "Signals",
    "Stats",
    "Store",
    "UnitOfWork",
    "Webhooks",
    "Workflows",
]

T = TypeVar("T")


class Clock(Protocol):
    def now(self) -> datetime:
        """The current instant, timezone-aware UTC."""
        ...


class IdGenerator(Protocol):
    def new_id(self, prefix: str) -> str:
        """A new unique, roughly time-ordered id such as ``hold_...``."""
        ...


class HoldRepository(Protocol):
    def get(self, tenant: str, hold_id: str) -> Hold | None: ...

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
        """Unexpired held and committed holds of any attendee overlapping [start, end).

        ``overlapping``: the ids of the active holds overlapping it, read already
        in this transaction (:attr:`ClaimLookup.overlapping`): not read again.
        """
        ...

    def blocking_spans(
        self, tenant: str, attendees: Collection[str], start: datetime, end: datetime, now: datetime
    ) -> list[tuple[datetime, datetime]]:
        """The (start, end) of each hold ``blocking`` lists, by start then end.

        What a search for free time avoids, without reading the holds whole:
        over a refusal's two-week horizon a busy calendar has hundreds.
        """
        ...

    def stale(
        self, tenant: str, attendees: Collection[str], start: datetime, end: datetime, now: datetime
    ) -> list[Hold]:
        """Held holds past their expiry, not yet marked, overlapping [start, end)."""
        ...

    def window(
        self, tenant: str, start: datetime, end: datetime, earliest_start: datetime, limit: int
    ) -> list[Hold]:
        """Holds of any status overlapping [start, end) that start at or after
        ``earliest_start``, by start then id (the dashboard's timeline).

        ``earliest_start`` bounds the scan: a hold is at most the policy's
        longest, so one overlapping ``start`` began no earlier than that before it.
        """
        ...

    def add(self, hold: Hold) -> None: ...

    def save(self, hold: Hold) -> None:
        """Write back a hold's mutable fields (status, token, times, preempted_by)."""
        ...

    def due_for_expiry(self, now: datetime, limit: int) -> list[Hold]: ...

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
    ) -> list[Hold]: ...


class Directory(Protocol):
    def lookup(
        self, tenant: str, emails: Collection[str], ids: Collection[str]
    ) -> tuple[dict[str, str], set[str]]:
        """Map the known emails to attendee ids, and tell which of ``ids`` exist."""
        ...

    def register(self, tenant: str, pairs: Sequence[tuple[str, str]], now: datetime) -> None:
        """Add attendees ``(id, email)`` first seen now; existing ones are kept."""
        ...

    def put(
        self, tenant: str, attendee_id: str, name: str | None, emails: Sequence[str], now: datetime
    ) -> None:
        """Create or update an attendee and point each email (alias) at it."""
        ...

    def entries(self, tenant: str, ids: Collection[str]) -> list[DirectoryEntry]:
        """The attendees of ``ids`` the directory has, by id, each with its name and
        emails (sorted); an unknown id is left out."""
        ...


class AuditLog(Protocol):
    def head(self, tenant: str) -> tuple[int, str]:
        """The last ``(seq, hash)`` of the tenant's chain; ``(0, GENESIS)`` when empty."""
        ...

    def append(self, entry: AuditEntry) -> None: ...

    def entries(self, tenant: str, after_seq: int, limit: int) -> list[AuditEntry]: ...

    def tenants(self) -> list[str]:
        """Every tenant with an entry or a recorded head, in order (``slotward audit``)."""
        ...


class ApiKeys(Protocol):
    def find(self, key_hash: str) -> Principal | None:
        """The principal of an unrevoked key with this hash."""
        ...

    def by_id(self, key_id: str) -> tuple[str, Principal] | None:
        """The stored hash and principal of the unrevoked key ``key_id``."""
        ...

    def add(self, key_id: str, key_hash: str, principal: Principal, now: datetime) -> None: ...

    def rehash(self, key_id: str, old_hash: str, new_hash: str) -> bool:
        """Store the unrevoked key ``key_id`` as ``new_hash`` if it is still ``old_hash``.

        False when it is not (revoked, or stored again by another server
        meanwhile): a compare-and-set, so a rehash never undoes a revocation.
        """
        ...

    def revoke(self, key_id: str, now: datetime) -> bool:
        """Revoke the key ``key_id``; False when no such unrevoked key exists."""
        ...


class UnitOfWork(Protocol):
    """One transaction. ``with uow:`` begins it; leaving without ``commit()`` rolls back."""

    @property
    def holds(self) -> HoldRepository: ...

    @property
    def ledger(self) -> Ledger: ...

    @property
    def directory(self) -> Directory: ...

    @property
    def audit(self) -> AuditLog: ...

    @property
    def outbox(self) -> Outbox: ...

    @property
    def deliveries(self) -> Deliveries: ...

    @property
    def webhooks(self) -> Webhooks: ...

    @property
    def leases(self) -> Leases: ...

    @property
    def calendars(self) -> Calendars: ...

    @property
    def mirror(self) -> Mirror: ...

    @property
    def calendar_writes(self) -> CalendarWrites: ...

    @property
    def keys(self) -> ApiKeys: ...

    @property
    def approvals(self) -> Approvals: ...

    @property
    def sessions(self) -> Sessions: ...

    @property
    def workflows(self) -> Workflows: ...

    @property
    def stats(self) -> Stats: ...

    def __enter__(self) -> UnitOfWork: ...

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...

    def lock_tenant(self, tenant: str) -> None:
        """Serialize this transaction with every other write of ``tenant``.

        Called first in every write use case that does not say which attendees
        it touches (:meth:`lock_attendees`). A store whose writers are already
        one at a time (SQLite: BEGIN IMMEDIATE) does nothing.
        """
        ...

    def lock_attendees(
        self, tenant: str, attendees: Collection[str], key: str | None = None
    ) -> None:
        """Serialize this transaction with every other write of ``tenant`` that
        touches one of ``attendees`` (or the ledger ``key``), and with its
        :meth:`lock_tenant` writers; writes on other attendees run alongside.

        Called first by a use case that touches only holds of these attendees
        (and records under ``key``), before it reads anything it decides on but
        the directory; called again for the attendees of each further hold it
        is about to change (a loser it preempts, a stale hold it expires),
        before changing it. The tenant's audit chain is ordered apart, at its
        head. A store whose writers are one at a time does nothing.
        """
        ...

    def lock_part(self, tenants: Collection[str], part: str) -> None:
        """Serialize this transaction with the :meth:`lock_tenant` writers of
        ``tenants`` and with every other write locking ``part`` of one of them
        (the relay: ``"relay"``); attendee writes (:meth:`lock_attendees`) run
        alongside, so ``part`` must be state no attendee write touches.

        Called first, with every tenant the transaction will touch. A store
        whose writers are one at a time does nothing.
        """
        ...

    def commit(self) -> None: ...


class Store(Protocol):
    """Runs use cases: each call is one transaction, run in one hop."""

    async def write(self, fn: Callable[[UnitOfWork], T]) -> T: ...

    async def read(self, fn: Callable[[UnitOfWork], T]) -> T: ...

    async def close(self) -> None: ...


class Signals(Protocol):
    """Tells the other server processes that something they may be waiting for changed.

    Best effort by nature: a signal is lost with a dropped connection or a crash
    between a commit and its signal, so whoever waits for one also looks again
    on a slow timer. A ``topic`` is a short opaque string carrying no secret.
    """

    async def start(self, receive: Callable[[str | None], None]) -> None:
        """Deliver the other processes' topics to ``receive`` from now on. ``None``
        means some may have been missed (the transport was down): look again at all."""
        ...

    def send(self, topic: str) -> None:
        """Signal ``topic``, once the change it announces has committed; never blocks."""
        ...

    async def close(self) -> None: ...
