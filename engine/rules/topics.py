"""Which events a webhook subscription receives: event types, or a family with ``.*``."""

from __future__ import annotations

from collections.abc import Sequence

from slotward.engine.errors import ValidationFailed

__all__ = ["EVENT_TYPES", "MAX_TOPICS", "matches", "parse_topics"]

# Every event type the outbox carries (DESIGN section 6). A subscription names
# some of them, or a family ("hold.*"): an unknown name is refused, not
# silently never delivered.
EVENT_TYPES: tuple[str, ...] = (
    "hold.created",
    "hold.committed",
    "hold.released",
    "hold.preempted",
    "hold.expired",
    "workflow.retry_storm",
    "webhook.disabled",
    "approval.requested",
    "approval.approved",
    "approval.denied",
    "approval.expired",
)
_FAMILIES = frozenset(t.split(".", 1)[0] for t in EVENT_TYPES)
MAX_TOPICS = len(EVENT_TYPES) + len(_FAMILIES)


def matches(topics: Sequence[str], event_type: str) -> bool:
    """Whether a subscription to ``topics`` receives an event of ``event_type``."""
    family = event_type.split(".", 1)[0]
    return any(t == event_type or t == f"{family}.*" for t in topics)


def parse_topics(raw: object) -> tuple[str, ...]:
    """A subscription's topics: a non-empty list of known types or families, deduplicated."""
    if not isinstance(raw, list) or not raw:
        raise ValidationFailed(
            "'topics' must be a non-empty list of event types", code="invalid_field"
        )
    topics: list[str] = []
    for item in raw:
        if not isinstance(item, str):
            raise ValidationFailed("each topic must be a string", code="invalid_field")
        family, _, rest = item.partition(".")
        if item not in EVENT_TYPES and not (rest == "*" and family in _FAMILIES):
            known = ", ".join(EVENT_TYPES)
            raise ValidationFailed(
                f"unknown topic {item[:80]!r}: use an event type ({known}) "
                "or a family such as 'hold.*'",
                code="invalid_topic",
            )
        if item not in topics:
            topics.append(item)
    return tuple(topics)
