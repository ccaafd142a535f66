"""Ports: what the engine needs from the outside world, as protocols.

Use cases are plain synchronous functions over a :class:`UnitOfWork`. The store
runs a whole use case in one go (on SQLite: one hop to its writer thread; on a
server database: one connection), so a transaction costs one thread hop, not
one per statement. ``async`` lives only at the :class:`Store` boundary.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import Protocol, TypeVar

from slotward.engine.model import (
    Attempt,
    AuditEntry,
    Claim,
    Delivery,
    DeliveryState,
    Gauges,
    Hold,
    HoldStatus,
    LedgerRecord,
    OutboxEvent,
    Principal,
    Subscription,
    WorkflowStats,
)

__all__ = [
    "ApiKeys",
    "AuditLog",
    "Clock",
    "Deliveries",
    "Directory",
    "HoldRepository",
    "IdGenerator",
    "Leases",
    "Ledger",
    "Outbox",
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

    def find_live_intent(
        self, tenant: str, workflow_id: str, intent_fp: str, now: datetime
    ) -> Hold | None:
        """A held (unexpired) or committed hold of this workflow with this intent."""
        ...

    def blocking(
        self, tenant: str, attendees: Collection[str], start: datetime, end: datetime, now: datetime
    ) -> list[Hold]:
        """Unexpired held and committed holds of any attendee overlapping [start, end)."""
        ...

    def stale(
        self, tenant: str, attendees: Collection[str], start: datetime, end: datetime, now: datetime
    ) -> list[Hold]:
        """Held holds past their expiry, not yet marked, overlapping [start, end)."""
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


class Ledger(Protocol):
    def get(self, tenant: str, key: str) -> LedgerRecord | None: ...

    def find_by_fingerprint(self, tenant: str, fingerprint: str) -> LedgerRecord | None:
        """The first record of the call with this fingerprint, under any key."""
        ...

    def add(self, record: LedgerRecord) -> None: ...

    def save(self, record: LedgerRecord) -> None:
        """Write back a record's mutable fields (state, answer, lease, times)."""
        ...

    def remove(self, tenant: str, key: str) -> None:
        """Forget a record: its key executes again (a retryable failure)."""
        ...

    def for_workflow(self, tenant: str, workflow_id: str, limit: int) -> list[LedgerRecord]:
        """The workflow's generic executions (not hold records), oldest first."""
        ...

    def purgeable_tenant(self, now: datetime) -> str | None:
        """Some tenant with a record past retention (and no live lease), if any."""
        ...

    def purge(self, tenant: str, now: datetime, limit: int) -> int:
        """Delete up to ``limit`` of the tenant's records past retention; return how many."""
        ...


class Workflows(Protocol):
    def get(self, tenant: str, workflow_id: str) -> WorkflowStats | None: ...

    def add_replays(self, tenant: str, workflow_id: str, count: int, last_at: datetime) -> None:
        """Add ``count`` replays seen up to ``last_at`` (creating the row if needed)."""
        ...

    def mark_storm(self, tenant: str, workflow_id: str, at: datetime) -> None:
        """Record that a retry storm was flagged at ``at`` (creating the row if needed)."""
        ...

    def add_replay_seconds(
        self, tenant: str, workflow_id: str, buckets: Mapping[datetime, int]
    ) -> None:
        """Add replays by the whole second (UTC) they happened in, to every process's."""
        ...

    def replays_since(self, tenant: str, workflow_id: str, since: datetime) -> int:
        """The replays of the seconds from ``since`` on, over every process's hand-overs."""
        ...

    def forget_replays_before(self, tenant: str, before: datetime) -> None:
        """Drop the tenant's per-second replay counts of the seconds before ``before``."""
        ...

    def tenant_with_replays_before(self, before: datetime) -> str | None:
        """Some tenant with per-second replay counts older than ``before``, if any."""
        ...


class Stats(Protocol):
    def gauges(self, now: datetime) -> Gauges:
        """Whole-store figures, over every tenant."""
        ...


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


class AuditLog(Protocol):
    def head(self, tenant: str) -> tuple[int, str]:
        """The last ``(seq, hash)`` of the tenant's chain; ``(0, GENESIS)`` when empty."""
        ...

    def append(self, entry: AuditEntry) -> None: ...

    def entries(self, tenant: str, after_seq: int, limit: int) -> list[AuditEntry]: ...

    def tenants(self) -> list[str]:
        """Every tenant with an entry or a recorded head, in order (``slotward audit``)."""
        ...


class Outbox(Protocol):
    """The events to deliver. Every id is global (``evt_...``); reads by a
    tenant see only its own."""

    def add(self, event: OutboxEvent) -> None:
        """Queue a new event (pending, not fanned out)."""
        ...

    def unfanned(self, limit: int) -> list[OutboxEvent]:
        """Up to ``limit`` events not yet fanned out, oldest first (created, then id).

        On PostgreSQL the rows are locked ``FOR UPDATE SKIP LOCKED``: two relays
        never fan out the same event.
        """
        ...

    def mark_fanned(self, event_ids: Sequence[str]) -> None: ...

    def settle(self, event_ids: Collection[str], now: datetime) -> None:
        """Set each fanned-out event's state from its deliveries.

        Pending while any delivery is pending; else dead if any is dead; else
        (every one delivered, or none at all) delivered. ``settled_at`` becomes
        ``now`` when the state leaves pending, None when it returns to it.
        """
        ...

    def get(self, tenant: str, event_id: str) -> OutboxEvent | None: ...

    def search(
        self, tenant: str, state: DeliveryState | None, after_id: str | None, limit: int
    ) -> list[OutboxEvent]:
        """The tenant's events in id order after ``after_id``, of ``state`` if given."""
        ...

    def purge_delivered(self, before: datetime, limit: int) -> int:
        """Delete up to ``limit`` delivered events settled before ``before``, with
        their deliveries and attempts; return how many events."""
        ...


class Deliveries(Protocol):
    """Each event's way to each subscription, and the log of every try."""

    def add(self, deliveries: Sequence[Delivery]) -> None: ...

    def claim(self, owner: str, now: datetime, until: datetime, limit: int) -> list[Claim]:
        """Claim for ``owner`` until ``until`` up to ``limit`` deliveries due now.

        Due: pending, ``next_attempt_at <= now``, unclaimed or its claim over
        (``claim_until <= now``), its subscription active. In order: never one
        whose hold has an earlier event (lower ``seq``) still pending to the
        same subscription or not yet fanned out, so per hold and subscription
        one event is in flight at a time. Soonest ``next_attempt_at`` first (then
        id). On PostgreSQL ``FOR UPDATE SKIP LOCKED``: relays side by side
        claim disjoint batches. The claimed rows are saved with the claim.
        """
        ...

    def get(self, delivery_id: str) -> Delivery | None: ...

    def save(self, delivery: Delivery) -> None:
        """Write back the mutable fields (state, attempts, next attempt, claim,
        delivered_at, last status and error)."""
        ...

    def add_attempt(
        self, delivery_id: str, at: datetime, status: int | None, error: str | None
    ) -> Attempt:
        """Log one try; it is numbered one past the delivery's last (1 first)."""
        ...

    def attempts(self, delivery_id: str) -> list[Attempt]:
        """Every try of the delivery, in order."""
        ...

    def for_event(self, event_id: str) -> list[Delivery]:
        """The event's deliveries, in subscription id order."""
        ...

    def kill_pending(self, subscription_id: str, now: datetime, reason: str) -> list[str]:
        """Make the subscription's pending deliveries dead (``last_error`` =
        ``reason``, claim cleared); return their event ids."""
        ...

    def remove_for_subscription(self, subscription_id: str) -> list[str]:
        """Delete the subscription's deliveries and their attempts; return the
        ids of the events they belonged to."""
        ...

    def redrive(self, event_id: str, now: datetime) -> int:
        """Put the event's dead deliveries to active subscriptions back to pending
        (attempts 0, due now, claim cleared, attempt log kept); return how many."""
        ...


class Webhooks(Protocol):
    """The tenants' webhook subscriptions."""

    def add(self, subscription: Subscription) -> None: ...

    def get(self, tenant: str, subscription_id: str) -> Subscription | None: ...

    def search(self, tenant: str, after_id: str | None, limit: int) -> list[Subscription]:
        """The tenant's subscriptions (active and disabled) in id order after ``after_id``."""
        ...

    def active(self, tenants: Collection[str]) -> list[Subscription]:
        """Every active subscription of these tenants (for the fan-out)."""
        ...

    def save(self, subscription: Subscription) -> None:
        """Write back the mutable fields (status, reason, secrets, topics,
        description, updated_at, the delivery figures)."""
        ...

    def remove(self, tenant: str, subscription_id: str) -> bool:
        """Delete the subscription; False when the tenant has none with this id."""
        ...


class Leases(Protocol):
    """Named leases: one holder at a time across the processes on one store."""

    def take(self, name: str, owner: str, now: datetime, until: datetime) -> bool:
        """Hold lease ``name`` for ``owner`` until ``until`` if it is free, over
        (its ``until <= now``) or ``owner``'s already (a renewal)."""
        ...

    def drop(self, name: str, owner: str) -> None:
        """Let go of lease ``name`` if ``owner`` holds it."""
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
    def keys(self) -> ApiKeys: ...

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

        Called first in every write use case. A store whose writers are already
        one at a time (SQLite: BEGIN IMMEDIATE) does nothing.
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
