"""Use cases of the webhook admin API: subscriptions, and the outbox's dead letters.

Each function is one transaction; each write locks its tenant first and appends
an audit entry for its change. The subscription's id, its sealed secret and its
checked fields come from the caller (api/webhooks.py): sealing needs the
server's key and checking a URL needs DNS, neither of which the engine has.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, TypeVar

from slotward.engine.errors import Conflict, NotFound
from slotward.engine.model import DeliveryState, OutboxEvent, Principal, SealedSecret, Subscription
from slotward.engine.ports import Clock, UnitOfWork
from slotward.engine.rules.policy import Policy
from slotward.engine.rules.webhook_documents import event_document, subscription_document
from slotward.engine.usecases.effects import audit

__all__ = [
    "MAX_SECRETS",
    "NewSubscription",
    "create_subscription",
    "delete_subscription",
    "enable_subscription",
    "get_event",
    "get_subscription",
    "list_events",
    "list_subscriptions",
    "redrive_event",
    "rotate_secret",
    "rotated",
]


T = TypeVar("T")


@dataclass(frozen=True)
class NewSubscription:
    """A subscription to store, its fields checked and its secret sealed already."""

    id: str
    url: str
    topics: tuple[str, ...]
    description: str | None
    secret: SealedSecret


def _load(uow: UnitOfWork, tenant: str, subscription_id: str) -> Subscription:
    found = uow.webhooks.get(tenant, subscription_id)
    if found is None:
        raise NotFound(f"no webhook subscription {subscription_id!r}", code="webhook_not_found")
    return found


def _event(uow: UnitOfWork, tenant: str, event_id: str) -> OutboxEvent:
    found = uow.outbox.get(tenant, event_id)
    if found is None:
        raise NotFound(f"no outbox event {event_id!r}", code="event_not_found")
    return found


def _page(items: list[T], limit: int, id_of: Callable[[T], str]) -> tuple[list[T], str | None]:
    """The first ``limit`` of ``items`` (fetched one more), and the cursor past them."""
    page = items[:limit]
    return page, (id_of(page[-1]) if len(items) > limit and page else None)


def create_subscription(
    uow: UnitOfWork, principal: Principal, new: NewSubscription, policy: Policy, clock: Clock
) -> dict[str, Any]:
    """Store a new active subscription; answer its document (without the secret)."""
    with uow:
        uow.lock_tenant(principal.tenant)
        now = clock.now()
        sub = Subscription(
            id=new.id, tenant=principal.tenant, url=new.url, topics=new.topics,
            description=new.description, status="active", secrets=(new.secret,),
            created_at=now, updated_at=now,
        )  # fmt: skip
        uow.webhooks.add(sub)
        audit(uow, principal.tenant, principal.agent_id, now, "webhook.create", sub.id, None,
              "created", audit_key=policy.audit_key)  # fmt: skip
        uow.commit()
    return subscription_document(sub)


def list_subscriptions(
    uow: UnitOfWork, principal: Principal, *, cursor: str | None, limit: int
) -> dict[str, Any]:
    """One page of the tenant's subscriptions in id order; ``next_cursor`` is the last id."""
    with uow:
        found = uow.webhooks.search(principal.tenant, cursor, limit + 1)
    page, next_cursor = _page(found, limit, lambda s: s.id)
    return {"items": [subscription_document(s) for s in page], "next_cursor": next_cursor}


def get_subscription(uow: UnitOfWork, principal: Principal, subscription_id: str) -> dict[str, Any]:
    with uow:
        sub = _load(uow, principal.tenant, subscription_id)
    return subscription_document(sub)


MAX_SECRETS = 3  # the current secret and the two it replaced last


def rotated(
    secrets: tuple[SealedSecret, ...], new: SealedSecret, now: datetime, overlap: timedelta
) -> tuple[SealedSecret, ...]:
    """``new`` becomes current; the previous current one signs beside it until
    ``now + overlap``; any already past its ``until`` is dropped, and so is any
    beyond the newest ``MAX_SECRETS`` (rotations piling up within an overlap
    would otherwise grow every delivery's signature header without bound)."""
    previous = [replace(s, until=now + overlap) if s.until is None else s for s in secrets]
    kept = [s for s in previous if s.until is not None and s.until > now]
    return (replace(new, until=None), *kept[: MAX_SECRETS - 1])


def rotate_secret(
    uow: UnitOfWork,
    principal: Principal,
    subscription_id: str,
    secret: SealedSecret,
    overlap: timedelta,
    policy: Policy,
    clock: Clock,
) -> dict[str, Any]:
    """Make ``secret`` the subscription's current one; answer its document."""
    with uow:
        uow.lock_tenant(principal.tenant)
        now = clock.now()
        sub = _load(uow, principal.tenant, subscription_id)
        sub = replace(sub, secrets=rotated(sub.secrets, secret, now, overlap), updated_at=now)
        uow.webhooks.save(sub)
        audit(uow, principal.tenant, principal.agent_id, now, "webhook.rotate", sub.id, None,
              "rotated", audit_key=policy.audit_key)  # fmt: skip
        uow.commit()
    return subscription_document(sub)


def enable_subscription(
    uow: UnitOfWork, principal: Principal, subscription_id: str, policy: Policy, clock: Clock
) -> dict[str, Any]:
    """Make a disabled subscription active again, its failures forgotten; answer its
    document. An active one is left as it is (enabling twice is enabling once). Its
    dead deliveries stay dead until re-driven."""
    with uow:
        uow.lock_tenant(principal.tenant)
        now = clock.now()
        sub = _load(uow, principal.tenant, subscription_id)
        if sub.status == "active":
            return subscription_document(sub)
        sub = replace(
            sub, status="active", disabled_reason=None, consecutive_failures=0,
            failing_since=None, updated_at=now,
        )  # fmt: skip
        uow.webhooks.save(sub)
        audit(uow, principal.tenant, principal.agent_id, now, "webhook.enable", sub.id, None,
              "enabled", audit_key=policy.audit_key)  # fmt: skip
        uow.commit()
    return subscription_document(sub)


def delete_subscription(
    uow: UnitOfWork, principal: Principal, subscription_id: str, policy: Policy, clock: Clock
) -> None:
    """Delete the subscription and its deliveries; its events settle without them."""
    with uow:
        uow.lock_tenant(principal.tenant)
        now = clock.now()
        sub = _load(uow, principal.tenant, subscription_id)
        touched = uow.deliveries.remove_for_subscription(sub.id)
        uow.outbox.settle(touched, now)
        uow.webhooks.remove(principal.tenant, sub.id)
        audit(uow, principal.tenant, principal.agent_id, now, "webhook.delete", sub.id, None,
              "deleted", audit_key=policy.audit_key)  # fmt: skip
        uow.commit()


def _event_document(uow: UnitOfWork, event: OutboxEvent) -> dict[str, Any]:
    deliveries = uow.deliveries.for_event(event.id)
    logs = {d.id: uow.deliveries.attempts(d.id) for d in deliveries}
    return event_document(event, deliveries, logs)


def list_events(
    uow: UnitOfWork,
    principal: Principal,
    *,
    state: DeliveryState | None,
    cursor: str | None,
    limit: int,
) -> dict[str, Any]:
    """One page of the tenant's outbox events in id order, with their deliveries."""
    with uow:
        found = uow.outbox.search(principal.tenant, state, cursor, limit + 1)
        page, next_cursor = _page(found, limit, lambda e: e.id)
        items = [_event_document(uow, e) for e in page]
    return {"items": items, "next_cursor": next_cursor}


def get_event(uow: UnitOfWork, principal: Principal, event_id: str) -> dict[str, Any]:
    with uow:
        return _event_document(uow, _event(uow, principal.tenant, event_id))


def redrive_event(
    uow: UnitOfWork, principal: Principal, event_id: str, policy: Policy, clock: Clock
) -> dict[str, Any]:
    """Send the event's dead deliveries again from the first attempt; answer the event.

    409 ``nothing_to_redrive`` when none can go: none is dead, or each dead one
    goes to a subscription that is disabled (or gone), which would only kill it
    again.
    """
    with uow:
        uow.lock_tenant(principal.tenant)
        now = clock.now()
        event = _event(uow, principal.tenant, event_id)
        if uow.deliveries.redrive(event.id, now) == 0:
            raise Conflict(_why_nothing(uow, event), code="nothing_to_redrive",
                           extra={"event_id": event.id})  # fmt: skip
        uow.outbox.settle([event.id], now)
        audit(uow, principal.tenant, principal.agent_id, now, "outbox.redrive", event.id,
              event.hold_id, "redriven", audit_key=policy.audit_key)  # fmt: skip
        doc = _event_document(uow, _event(uow, principal.tenant, event.id))
        uow.commit()
    return doc


def _why_nothing(uow: UnitOfWork, event: OutboxEvent) -> str:
    dead = [d for d in uow.deliveries.for_event(event.id) if d.state == "dead"]
    if not dead:
        return f"event {event.id!r} has no dead delivery to re-drive (it is {event.state})"
    blocked = []
    for delivery in dead:
        sub = uow.webhooks.get(event.tenant, delivery.subscription_id)
        status = "deleted" if sub is None else sub.status
        blocked.append(f"{delivery.subscription_id} ({status})")
    return (
        f"event {event.id!r}'s dead deliveries go to subscriptions that are not active: "
        f"{', '.join(blocked)}; a delivery to a disabled or deleted subscription cannot be "
        "re-driven"
    )
