"""Request and response shapes of the webhook admin API (beside api/http/schemas.py):
they validate input, and the OpenAPI document is generated from them."""

from __future__ import annotations

from slotward.engine.rules.shapes import Field, Shape
from slotward.engine.rules.topics import EVENT_TYPES

__all__ = [
    "OUTBOX_EVENT",
    "OUTBOX_LIST",
    "WEBHOOK",
    "WEBHOOK_CREATE",
    "WEBHOOK_CREATED",
    "WEBHOOK_ENABLE",
    "WEBHOOK_LIST",
    "WEBHOOK_ROTATE",
]


_TOPICS = ", ".join(EVENT_TYPES)
WEBHOOK_CREATE = Shape(
    "WebhookCreate",
    (
        Field(
            "url", "string", required=True, min_length=1, max_length=2048,
            description="An http(s) URL whose host resolves to public addresses only",
            example="https://hooks.example.com/slotward",
        ),
        Field(
            "topics", "array", required=True, min_items=1, max_items=64,
            items=Field("topic", "string", min_length=1, max_length=80),
            description=f"Event types ({_TOPICS}) or a family such as 'hold.*'",
            example=["hold.*"],
        ),
        Field("description", "string", nullable=True, max_length=500),
    ),
    description="Subscribe a URL to the tenant's events",
)  # fmt: skip
WEBHOOK_ROTATE = Shape(
    "WebhookRotate",
    (
        Field(
            "overlap_hours", "integer", minimum=0, maximum=168,
            description="How long the old secret keeps signing beside the new one (default 24)",
        ),
    ),
)  # fmt: skip
WEBHOOK_ENABLE = Shape(
    "WebhookEnable", (), description="Nothing to send: the body is optional, and empty"
)
_SECRET_STATE = Shape(
    "WebhookSecretState",
    (
        Field("current", "boolean", required=True),
        Field("until", "string", required=True, nullable=True,
              description="When a rotated-out secret stops signing; null for the current one"),
    ),
)  # fmt: skip
_WEBHOOK_FIELDS = (
    Field("id", "string", required=True),
    Field("url", "string", required=True),
    Field("topics", "array", required=True, items=Field("topic", "string")),
    Field("description", "string", required=True, nullable=True),
    Field("status", "string", required=True, enum=("active", "disabled")),
    Field("disabled_reason", "string", required=True, nullable=True),
    Field("created_at", "string", required=True),
    Field("updated_at", "string", required=True),
    Field("last_attempt_at", "string", required=True, nullable=True),
    Field("last_status", "integer", required=True, nullable=True,
          description="The last attempt's HTTP status; null when it got no answer"),
    Field("last_delivery_at", "string", required=True, nullable=True,
          description="The last successful delivery"),
    Field("consecutive_failures", "integer", required=True),
    Field("failing_since", "string", required=True, nullable=True),
    Field("secrets", "array", required=True, items=_SECRET_STATE,
          description="Never the secrets themselves: the current one first"),
)  # fmt: skip
WEBHOOK = Shape("Webhook", _WEBHOOK_FIELDS)
WEBHOOK_CREATED = Shape(
    "WebhookWithSecret",
    (
        *_WEBHOOK_FIELDS,
        Field("secret", "string", required=True, pattern="^whsec_",
              description="The new signing secret: shown in this answer only"),
    ),
)  # fmt: skip
WEBHOOK_LIST = Shape(
    "WebhookList",
    (
        Field("items", "array", required=True, items=WEBHOOK),
        Field("next_cursor", "string", required=True, nullable=True),
    ),
)
_STATE = ("pending", "delivered", "dead")
_ATTEMPT = Shape(
    "DeliveryAttempt",
    (
        Field("n", "integer", required=True),
        Field("at", "string", required=True),
        Field("status", "integer", required=True, nullable=True),
        Field("error", "string", required=True, nullable=True),
    ),
)
_DELIVERY = Shape(
    "Delivery",
    (
        Field("id", "string", required=True),
        Field("subscription_id", "string", required=True),
        Field("state", "string", required=True, enum=_STATE),
        Field("attempts", "integer", required=True, description="Tries of this drive"),
        Field("next_attempt_at", "string", required=True),
        Field("delivered_at", "string", required=True, nullable=True),
        Field("last_status", "integer", required=True, nullable=True),
        Field("last_error", "string", required=True, nullable=True),
        Field("log", "array", required=True, items=_ATTEMPT, description="Every try, in order"),
    ),
)
OUTBOX_EVENT = Shape(
    "OutboxEvent",
    (
        Field("id", "string", required=True),
        Field("type", "string", required=True),
        Field("hold_id", "string", required=True, nullable=True),
        Field("seq", "integer", required=True, nullable=True),
        Field("state", "string", required=True, enum=_STATE),
        Field("created_at", "string", required=True),
        Field("settled_at", "string", required=True, nullable=True),
        Field("deliveries", "array", required=True, items=_DELIVERY),
    ),
)
OUTBOX_LIST = Shape(
    "OutboxList",
    (
        Field("items", "array", required=True, items=OUTBOX_EVENT),
        Field("next_cursor", "string", required=True, nullable=True),
    ),
)
