"""Webhook subscriptions and the outbox's dead letters: the admin's services.

Part of the service layer (api/service.py), no aiohttp. A subscription's secret
is made here, shown once in the answer that made it, and stored only sealed
(api/secretbox.py, under SLOTWARD_SECRET_KEY, the subscription id as context).
Everything that can refuse a call runs before the write: the URL's SSRF check
(which resolves its host), the topics, and the sealing, so a refused call
stores nothing.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from datetime import timedelta
from functools import partial
from typing import Any, get_args

from slotward.api.bootstrap import Services
from slotward.api.service import ADMINS, require_role
from slotward.engine.errors import ValidationFailed
from slotward.engine.model import DeliveryState, Principal, SealedSecret
from slotward.engine.rules.signing import new_secret
from slotward.engine.rules.topics import parse_topics
from slotward.engine.usecases import subscriptions

__all__ = [
    "DEFAULT_OVERLAP_HOURS",
    "MAX_DESCRIPTION",
    "MAX_OVERLAP_HOURS",
    "MAX_URL",
    "create_webhook",
    "delete_webhook",
    "enable_webhook",
    "get_event",
    "get_webhook",
    "list_events",
    "list_webhooks",
    "redrive_event",
    "rotate_webhook",
]

MAX_URL = 2048
MAX_DESCRIPTION = 500
DEFAULT_OVERLAP_HOURS = 24
MAX_OVERLAP_HOURS = 168  # a week: long enough to roll any receiver's config
_FIELDS = ("url", "topics", "description")
_STATES: tuple[str, ...] = get_args(DeliveryState)


def _refuse(field: str, detail: str, code: str = "invalid_field") -> ValidationFailed:
    return ValidationFailed(detail, code=code, extra={"field": field})


def _description(fields: Mapping[str, Any]) -> str | None:
    value = fields.get("description")
    if value is not None and (not isinstance(value, str) or len(value) > MAX_DESCRIPTION):
        raise _refuse("description", f"'description' must be a string of at most "
                      f"{MAX_DESCRIPTION} characters")  # fmt: skip
    return value


def _url(fields: Mapping[str, Any]) -> str:
    value = fields.get("url")
    if not isinstance(value, str) or not 1 <= len(value) <= MAX_URL:
        raise _refuse("url", f"'url' must be an http(s) URL of at most {MAX_URL} characters")
    return value


def _checked(fields: Mapping[str, Any]) -> tuple[str, tuple[str, ...], str | None]:
    unknown = sorted(k for k in fields if k not in _FIELDS)
    if unknown:
        raise ValidationFailed(
            f"unknown field '{unknown[0]}'; allowed fields: {', '.join(_FIELDS)}",
            code="unknown_field",
            extra={"field": unknown[0], "allowed": list(_FIELDS)},
        )
    if "topics" not in fields:
        raise _refuse("topics", "missing required field 'topics'", "missing_field")
    return _url(fields), parse_topics(fields["topics"]), _description(fields)


def _with_secret(doc: dict[str, Any], secret: str) -> dict[str, Any]:
    return {**doc, "secret": secret}


async def create_webhook(
    svc: Services, principal: Principal, fields: Mapping[str, Any]
) -> dict[str, Any]:
    """Subscribe ``url`` to ``topics``; the answer carries the new secret, once."""
    require_role(principal, ADMINS)
    url, topics, description = _checked(fields)
    await svc.urls.check(url)  # the SSRF check; each delivery checks again
    subscription_id = svc.ids.new_id("wh")
    secret = new_secret(os.urandom(32))
    sealed = SealedSecret(svc.box.seal(secret, subscription_id))
    new = subscriptions.NewSubscription(subscription_id, url, topics, description, sealed)
    doc = await svc.store.write(
        partial(subscriptions.create_subscription, principal=principal, new=new,
                policy=svc.policy, clock=svc.clock)
    )  # fmt: skip
    return _with_secret(doc, secret)


async def rotate_webhook(
    svc: Services, principal: Principal, subscription_id: str, overlap_hours: int | None = None
) -> dict[str, Any]:
    """A new current secret (answered once); the old one keeps signing for ``overlap_hours``."""
    require_role(principal, ADMINS)
    hours = DEFAULT_OVERLAP_HOURS if overlap_hours is None else overlap_hours
    if isinstance(hours, bool) or not isinstance(hours, int) or not 0 <= hours <= MAX_OVERLAP_HOURS:
        raise _refuse("overlap_hours", f"'overlap_hours' must be an integer from 0 to "
                      f"{MAX_OVERLAP_HOURS}")  # fmt: skip
    secret = new_secret(os.urandom(32))
    sealed = SealedSecret(svc.box.seal(secret, subscription_id))
    doc = await svc.store.write(
        partial(subscriptions.rotate_secret, principal=principal, subscription_id=subscription_id,
                secret=sealed, overlap=timedelta(hours=hours), policy=svc.policy,
                clock=svc.clock)
    )  # fmt: skip
    return _with_secret(doc, secret)


async def list_webhooks(
    svc: Services, principal: Principal, *, cursor: str | None, limit: int
) -> dict[str, Any]:
    require_role(principal, ADMINS)
    return await svc.store.read(
        partial(subscriptions.list_subscriptions, principal=principal, cursor=cursor, limit=limit)
    )


async def get_webhook(svc: Services, principal: Principal, subscription_id: str) -> dict[str, Any]:
    require_role(principal, ADMINS)
    return await svc.store.read(
        partial(subscriptions.get_subscription, principal=principal,
                subscription_id=subscription_id)
    )  # fmt: skip


async def enable_webhook(
    svc: Services, principal: Principal, subscription_id: str
) -> dict[str, Any]:
    """Make a disabled subscription active again (re-drive its dead events after)."""
    require_role(principal, ADMINS)
    return await svc.store.write(
        partial(subscriptions.enable_subscription, principal=principal,
                subscription_id=subscription_id, policy=svc.policy, clock=svc.clock)
    )  # fmt: skip


async def delete_webhook(svc: Services, principal: Principal, subscription_id: str) -> None:
    """Delete the subscription; its deliveries not yet made are dropped with it."""
    require_role(principal, ADMINS)
    await svc.store.write(
        partial(subscriptions.delete_subscription, principal=principal,
                subscription_id=subscription_id, policy=svc.policy, clock=svc.clock)
    )  # fmt: skip


def _state(raw: str | None) -> DeliveryState | None:
    if raw is None:
        return None
    for state in get_args(DeliveryState):
        if raw == state:
            found: DeliveryState = state
            return found
    raise _refuse("state", f"'state' must be one of {', '.join(_STATES)}")


async def list_events(
    svc: Services, principal: Principal, *, state: str | None, cursor: str | None, limit: int
) -> dict[str, Any]:
    """One page of the tenant's outbox events (of ``state`` if given), with their deliveries."""
    require_role(principal, ADMINS)
    wanted = _state(state)
    return await svc.store.read(
        partial(subscriptions.list_events, principal=principal, state=wanted, cursor=cursor,
                limit=limit)
    )  # fmt: skip


async def get_event(svc: Services, principal: Principal, event_id: str) -> dict[str, Any]:
    require_role(principal, ADMINS)
    return await svc.store.read(
        partial(subscriptions.get_event, principal=principal, event_id=event_id)
    )


async def redrive_event(svc: Services, principal: Principal, event_id: str) -> dict[str, Any]:
    """Send the event's dead deliveries again, from the first attempt of the schedule."""
    require_role(principal, ADMINS)
    return await svc.store.write(
        partial(subscriptions.redrive_event, principal=principal, event_id=event_id,
                policy=svc.policy, clock=svc.clock)
    )  # fmt: skip
