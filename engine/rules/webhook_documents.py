"""The public JSON form of webhook subscriptions and outbox events (the admin API).

Beside engine/rules/documents.py, in its style. A subscription's document never
carries a secret, sealed or not: only whether each is the current one and
until when a rotated-out one still signs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from slotward.engine.model import Attempt, Delivery, OutboxEvent, Subscription
from slotward.engine.rules.timenorm import format_instant

__all__ = ["event_document", "subscription_document"]


def _instant(value: datetime | None) -> str | None:
    return None if value is None else format_instant(value)


def subscription_document(sub: Subscription) -> dict[str, Any]:
    """A subscription as its tenant's admins see it: its figures, never a secret."""
    return {
        "id": sub.id,
        "url": sub.url,
        "topics": list(sub.topics),
        "description": sub.description,
        "status": sub.status,
        "disabled_reason": sub.disabled_reason,
        "created_at": format_instant(sub.created_at),
        "updated_at": format_instant(sub.updated_at),
        "last_attempt_at": _instant(sub.last_attempt_at),
        "last_status": sub.last_status,
        "last_delivery_at": _instant(sub.last_delivery_at),
        "consecutive_failures": sub.consecutive_failures,
        "failing_since": _instant(sub.failing_since),
        # The current secret first (engine/model.py): the others are rotated out.
        "secrets": [
            {"current": i == 0, "until": _instant(s.until)} for i, s in enumerate(sub.secrets)
        ],
    }


def _attempt_document(attempt: Attempt) -> dict[str, Any]:
    return {
        "n": attempt.n,
        "at": format_instant(attempt.at),
        "status": attempt.status,
        "error": attempt.error,
    }


def _delivery_document(delivery: Delivery, log: Sequence[Attempt]) -> dict[str, Any]:
    return {
        "id": delivery.id,
        "subscription_id": delivery.subscription_id,
        "state": delivery.state,
        "attempts": delivery.attempts,
        "next_attempt_at": format_instant(delivery.next_attempt_at),
        "delivered_at": _instant(delivery.delivered_at),
        "last_status": delivery.last_status,
        "last_error": delivery.last_error,
        "log": [_attempt_document(a) for a in log],
    }


def event_document(
    event: OutboxEvent,
    deliveries: Sequence[Delivery],
    logs: Mapping[str, Sequence[Attempt]],
) -> dict[str, Any]:
    """An outbox event with each of its deliveries and their attempt logs (by delivery id)."""
    return {
        "id": event.id,
        "type": event.type,
        "hold_id": event.hold_id,
        "seq": event.seq,
        "state": event.state,
        "created_at": format_instant(event.created_at),
        "settled_at": _instant(event.settled_at),
        "deliveries": [_delivery_document(d, logs.get(d.id, ())) for d in deliveries],
    }
