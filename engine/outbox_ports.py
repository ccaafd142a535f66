"""Ports of the outbox and its delivery: events, deliveries, subscriptions, leases.

Part of engine/ports.py (which re-exports them), kept apart so each module
stays readable: what the relay (engine/usecases/relay.py) and the webhook
admin use cases need from the store.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Protocol

from slotward.engine.model import (
    Attempt,
    Claim,
    Delivery,
    DeliveryState,
    OutboxEvent,
    Subscription,
)

__all__ = ["Deliveries", "Leases", "Outbox", "Webhooks"]


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

    def mark_unwanted(self, event_ids: Sequence[str], now: datetime) -> None:
        """Mark events that were fanned out to no delivery: fanned, and delivered at
        ``now`` (what ``mark_fanned`` then ``settle`` make of an event without
        deliveries, in one step). Events already fanned out are left alone."""
        ...

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

    def get_many(self, delivery_ids: Collection[str]) -> list[Delivery]:
        """The deliveries of these ids that exist, in id order (one statement)."""
        ...

    def save_many(self, deliveries: Sequence[Delivery]) -> None:
        """:meth:`save` each (one statement, whatever their number)."""
        ...

    def add_attempts(self, tries: Sequence[tuple[str, datetime, int | None, str | None]]) -> None:
        """:meth:`add_attempt` for each ``(delivery_id, at, status, error)``, numbered the
        same way, at most one per delivery (one statement)."""
        ...

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
