"""In-memory outbox, deliveries, webhook subscriptions and leases.

The relay's side of engine/fakes.py, as adapters/store/delivery_repos.py is
the SQL store's: the same contract (tests/contract runs both), the same
orders (events oldest first, deliveries by their next attempt then id).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Collection, Sequence
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING

from slotward.engine.model import (
    Attempt,
    Claim,
    Delivery,
    DeliveryState,
    OutboxEvent,
    Subscription,
)
from slotward.engine.rules.delivery import settled_state

if TYPE_CHECKING:  # fakes.py imports this module
    from slotward.engine.fakes import State

__all__ = ["FakeDeliveries", "FakeLeases", "FakeOutbox", "FakeWebhooks"]


class FakeOutbox:
    def __init__(self, state: Callable[[], State]) -> None:
        self._state = state

    def add(self, event: OutboxEvent) -> None:
        outbox = self._state().outbox
        if any(e.id == event.id for e in outbox):  # the id is the store's key
            raise KeyError(f"duplicate event id {event.id}")
        outbox.append(event)

    def _replace(self, ids: Collection[str], change: Callable[[OutboxEvent], OutboxEvent]) -> None:
        outbox = self._state().outbox
        for i, e in enumerate(outbox):
            if e.id in ids:
                outbox[i] = change(e)

    def unfanned(self, limit: int) -> list[OutboxEvent]:
        waiting = [e for e in self._state().outbox if not e.fanned]
        return sorted(waiting, key=lambda e: (e.created_at, e.id))[:limit]

    def mark_fanned(self, event_ids: Sequence[str]) -> None:
        self._replace(set(event_ids), lambda e: replace(e, fanned=True))

    def mark_unwanted(self, event_ids: Sequence[str], now: datetime) -> None:
        def done(e: OutboxEvent) -> OutboxEvent:
            return e if e.fanned else replace(e, fanned=True, state="delivered", settled_at=now)

        self._replace(set(event_ids), done)

    def settle(self, event_ids: Collection[str], now: datetime) -> None:
        deliveries = self._state().deliveries.values()

        def settled(e: OutboxEvent) -> OutboxEvent:
            if not e.fanned:
                return e
            state = settled_state({d.state for d in deliveries if d.event_id == e.id})
            if state == "pending":
                return replace(e, state=state, settled_at=None)
            if state != e.state:
                return replace(e, state=state, settled_at=now)
            return e

        self._replace(set(event_ids), settled)

    def get(self, tenant: str, event_id: str) -> OutboxEvent | None:
        found = (e for e in self._state().outbox if e.id == event_id and e.tenant == tenant)
        return next(found, None)

    def search(
        self, tenant: str, state: DeliveryState | None, after_id: str | None, limit: int
    ) -> list[OutboxEvent]:
        found = sorted(
            (
                e for e in self._state().outbox
                if e.tenant == tenant
                and (state is None or e.state == state)
                and (after_id is None or e.id > after_id)
            ),
            key=lambda e: e.id,
        )  # fmt: skip
        return found[:limit]

    def purge_delivered(self, before: datetime, limit: int) -> int:
        state = self._state()
        old = sorted(
            (
                e for e in state.outbox
                if e.state == "delivered" and e.settled_at is not None
                and e.created_at < before and e.settled_at < before
            ),
            key=lambda e: (e.created_at, e.id),
        )[:limit]  # fmt: skip
        gone = {e.id for e in old}
        state.outbox = [e for e in state.outbox if e.id not in gone]
        for d in [d for d in state.deliveries.values() if d.event_id in gone]:
            del state.deliveries[d.id]
            state.attempts.pop(d.id, None)
        return len(gone)


class FakeDeliveries:
    def __init__(self, state: Callable[[], State]) -> None:
        self._state = state

    def add(self, deliveries: Sequence[Delivery]) -> None:
        stored = self._state().deliveries
        pairs = {(d.event_id, d.subscription_id) for d in stored.values()}
        for d in deliveries:  # the id and (event, subscription) are unique, as in SQL
            if d.id in stored or (d.event_id, d.subscription_id) in pairs:
                raise KeyError(f"duplicate delivery {d.id}")
            stored[d.id] = d
            pairs.add((d.event_id, d.subscription_id))

    def _blocked(self, d: Delivery) -> bool:
        """An earlier event of its hold is still on its way to the same subscription,
        or not yet fanned out."""
        if d.hold_id is None or d.seq is None:
            return False
        seq, state = d.seq, self._state()
        return any(
            o.subscription_id == d.subscription_id and o.hold_id == d.hold_id
            and o.seq is not None and o.seq < seq and o.state == "pending"
            for o in state.deliveries.values()
        ) or any(
            e.hold_id == d.hold_id and e.seq is not None and e.seq < seq and not e.fanned
            for e in state.outbox
        )  # fmt: skip

    def claim(self, owner: str, now: datetime, until: datetime, limit: int) -> list[Claim]:
        state = self._state()
        events = {e.id: e for e in state.outbox}
        due = sorted(
            (
                d for d in state.deliveries.values()
                if d.state == "pending" and d.next_attempt_at <= now
                and (d.claim_until is None or d.claim_until <= now)
                and d.event_id in events
                and _active(state.webhooks.get(d.subscription_id))
                and not self._blocked(d)
            ),
            key=lambda d: (d.next_attempt_at, d.id),
        )[:limit]  # fmt: skip
        claims = []
        for d in due:
            claimed = replace(d, claim_owner=owner, claim_until=until)
            state.deliveries[d.id] = claimed
            claims.append(Claim(claimed, events[d.event_id], state.webhooks[d.subscription_id]))
        return claims

    def get(self, delivery_id: str) -> Delivery | None:
        return self._state().deliveries.get(delivery_id)

    def save(self, delivery: Delivery) -> None:
        stored = self._state().deliveries.get(delivery.id)
        if stored is not None:  # only the mutable fields are written back, as in SQL
            self._state().deliveries[delivery.id] = replace(
                delivery,
                event_id=stored.event_id,
                subscription_id=stored.subscription_id,
                tenant=stored.tenant,
                hold_id=stored.hold_id,
                seq=stored.seq,
                created_at=stored.created_at,
            )

    def get_many(self, delivery_ids: Collection[str]) -> list[Delivery]:
        found = (self._state().deliveries.get(i) for i in sorted(set(delivery_ids)))
        return [d for d in found if d is not None]

    def save_many(self, deliveries: Sequence[Delivery]) -> None:
        for delivery in deliveries:
            self.save(delivery)

    def add_attempts(self, tries: Sequence[tuple[str, datetime, int | None, str | None]]) -> None:
        if len({t[0] for t in tries}) != len(tries):
            raise ValueError("at most one attempt per delivery in one call")
        for delivery_id, at, status, error in tries:
            self.add_attempt(delivery_id, at, status, error)

    def add_attempt(
        self, delivery_id: str, at: datetime, status: int | None, error: str | None
    ) -> Attempt:
        log = self._state().attempts.setdefault(delivery_id, [])
        attempt = Attempt(delivery_id, max((a.n for a in log), default=0) + 1, at, status, error)
        log.append(attempt)
        return attempt

    def attempts(self, delivery_id: str) -> list[Attempt]:
        return sorted(self._state().attempts.get(delivery_id, []), key=lambda a: a.n)

    def for_event(self, event_id: str) -> list[Delivery]:
        found = [d for d in self._state().deliveries.values() if d.event_id == event_id]
        return sorted(found, key=lambda d: d.subscription_id)

    def _of(self, subscription_id: str) -> list[Delivery]:
        found = self._state().deliveries.values()
        return sorted((d for d in found if d.subscription_id == subscription_id), key=_event_id)

    def kill_pending(self, subscription_id: str, now: datetime, reason: str) -> list[str]:
        killed = [d for d in self._of(subscription_id) if d.state == "pending"]
        for d in killed:
            self._state().deliveries[d.id] = replace(
                d, state="dead", last_error=reason, claim_owner=None, claim_until=None
            )
        return [d.event_id for d in killed]

    def remove_for_subscription(self, subscription_id: str) -> list[str]:
        state, gone = self._state(), self._of(subscription_id)
        for d in gone:
            del state.deliveries[d.id]
            state.attempts.pop(d.id, None)
        return [d.event_id for d in gone]

    def redrive(self, event_id: str, now: datetime) -> int:
        state = self._state()
        dead = [
            d for d in state.deliveries.values()
            if d.event_id == event_id and d.state == "dead"
            and _active(state.webhooks.get(d.subscription_id))
        ]  # fmt: skip
        for d in dead:
            state.deliveries[d.id] = replace(
                d, state="pending", attempts=0, next_attempt_at=now,
                claim_owner=None, claim_until=None,
            )  # fmt: skip
        return len(dead)


def _active(subscription: Subscription | None) -> bool:
    return subscription is not None and subscription.status == "active"


def _event_id(delivery: Delivery) -> str:
    return delivery.event_id


class FakeWebhooks:
    def __init__(self, state: Callable[[], State]) -> None:
        self._state = state

    def add(self, subscription: Subscription) -> None:
        stored = self._state().webhooks
        if subscription.id in stored:  # ids are global, as in SQL
            raise KeyError(f"duplicate subscription id {subscription.id}")
        stored[subscription.id] = subscription

    def get(self, tenant: str, subscription_id: str) -> Subscription | None:
        found = self._state().webhooks.get(subscription_id)
        return found if found is not None and found.tenant == tenant else None

    def search(self, tenant: str, after_id: str | None, limit: int) -> list[Subscription]:
        found = (
            s for _, s in sorted(self._state().webhooks.items())
            if s.tenant == tenant and (after_id is None or s.id > after_id)
        )  # fmt: skip
        return list(itertools.islice(found, limit))

    def active(self, tenants: Collection[str]) -> list[Subscription]:
        wanted = set(tenants)
        found = self._state().webhooks.values()
        return sorted(
            (s for s in found if s.tenant in wanted and s.status == "active"), key=lambda s: s.id
        )

    def save(self, subscription: Subscription) -> None:
        stored = self.get(subscription.tenant, subscription.id)
        if stored is not None:  # where it goes and since when stay as first stored
            self._state().webhooks[subscription.id] = replace(
                subscription, url=stored.url, created_at=stored.created_at
            )

    def remove(self, tenant: str, subscription_id: str) -> bool:
        if self.get(tenant, subscription_id) is None:
            return False
        del self._state().webhooks[subscription_id]
        return True


class FakeLeases:
    def __init__(self, state: Callable[[], State]) -> None:
        self._state = state

    def take(self, name: str, owner: str, now: datetime, until: datetime) -> bool:
        leases = self._state().leases
        held = leases.get(name)
        if held is not None and held[0] != owner and held[1] > now:
            return False
        leases[name] = (owner, until)
        return True

    def drop(self, name: str, owner: str) -> None:
        leases = self._state().leases
        if name in leases and leases[name][0] == owner:
            del leases[name]
