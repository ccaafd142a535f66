"""Immutable values of the coordination core: holds, ledger records, audit, events."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

__all__ = [
    "Attempt",
    "AuditEntry",
    "Claim",
    "Delivery",
    "DeliveryState",
    "ExecutionState",
    "Gauges",
    "Hold",
    "HoldStatus",
    "LedgerRecord",
    "OutboxEvent",
    "Principal",
    "Reply",
    "Role",
    "SealedSecret",
    "Subscription",
    "SubscriptionStatus",
    "WorkflowStats",
]

ExecutionState = Literal["executing", "succeeded", "failed_terminal"]

Role = Literal["agent", "reviewer", "admin"]

# An outbox event and each of its deliveries: pending until it reached every
# subscription it was fanned out to (delivered) or one of them gave up (dead).
DeliveryState = Literal["pending", "delivered", "dead"]

SubscriptionStatus = Literal["active", "disabled"]


class HoldStatus(enum.StrEnum):
    HELD = "held"
    COMMITTED = "committed"
    RELEASED = "released"
    EXPIRED = "expired"
    PREEMPTED = "preempted"


@dataclass(frozen=True)
class Principal:
    """Who is calling: resolved from an API key."""

    tenant: str
    agent_id: str
    role: Role
    priority: int


def status_at(status: HoldStatus, expires_at: datetime, now: datetime) -> HoldStatus:
    """The status a reader sees of a hold stored with ``status`` and ``expires_at``:
    a held hold past its expiry is expired, swept or not (:meth:`Hold.status_at`)."""
    if status is HoldStatus.HELD and expires_at <= now:
        return HoldStatus.EXPIRED
    return status


@dataclass(frozen=True)
class Hold:
    id: str
    key: str
    tenant: str
    workflow_id: str
    agent_id: str
    attendees: tuple[str, ...]
    start: datetime
    end: datetime
    title: str
    description: str | None
    priority: int
    status: HoldStatus
    expires_at: datetime
    token: int
    intent_fp: str
    created_at: datetime
    updated_at: datetime
    audit_seq: int
    committed_at: datetime | None = None
    preempted_by: str | None = None
    # How many outbox events the hold has emitted: its last event's per-hold
    # sequence number (1 for hold.created). Each transition bumps it.
    event_seq: int = 0

    def status_at(self, now: datetime) -> HoldStatus:
        """The status a reader sees: a held hold past its expiry is expired, swept or not."""
        return status_at(self.status, self.expires_at, now)

    def blocks_at(self, now: datetime) -> bool:
        return self.status_at(now) in (HoldStatus.HELD, HoldStatus.COMMITTED)


# Built with keywords only: thirteen positional fields read as a riddle.
@dataclass(frozen=True, kw_only=True)
class LedgerRecord:
    """One idempotency record: the first answer given under ``key``.

    ``kind`` tells a hold tool's record (its ``body`` is the answer) from a
    generic execution's (``/v1/executions``: ``body`` is the completion's
    ``result`` as JSON, ``lease_token`` the current holder's fencing token).
    ``created`` says whether that first answer made a new resource (a placed
    hold, a lease taken); a replay says so again.
    """

    tenant: str
    key: str
    fingerprint: str
    state: ExecutionState
    created: bool
    body: bytes
    created_at: datetime
    expires_at: datetime
    hold_id: str | None = None
    kind: Literal["hold", "execution", "approval"] = "hold"
    workflow_id: str | None = None
    tool: str | None = None
    agent_id: str | None = None
    lease_token: str | None = None
    lease_expires_at: datetime | None = None
    completed_at: datetime | None = None


@dataclass(frozen=True)
class AuditEntry:
    tenant: str
    seq: int
    at: datetime
    actor: str
    action: str
    key: str | None
    hold_id: str | None
    outcome: str
    prev_hash: str
    hash: str


@dataclass(frozen=True)
class OutboxEvent:
    """One event to deliver; written in the transaction of the change it announces.

    ``seq`` is the event's place among its hold's events (1, 2, ...; None for
    an event of no hold). ``fanned``: the relay has made its deliveries (one
    per matching active subscription). ``settled_at``: when it became
    delivered or dead.
    """

    id: str
    tenant: str
    type: str
    created_at: datetime
    payload: dict[str, Any] = field(default_factory=dict)
    hold_id: str | None = None
    seq: int | None = None
    state: DeliveryState = "pending"
    fanned: bool = False
    settled_at: datetime | None = None


@dataclass(frozen=True)
class SealedSecret:
    """A webhook signing secret as stored: sealed by the server's secret box.

    ``until`` is None for the current secret; a rotated-out one keeps signing
    beside it until then.
    """

    sealed: str
    until: datetime | None = None


@dataclass(frozen=True, kw_only=True)
class Subscription:
    """A webhook subscription: where a tenant's events of ``topics`` are sent."""

    id: str
    tenant: str
    url: str
    topics: tuple[str, ...]
    description: str | None
    status: SubscriptionStatus
    secrets: tuple[SealedSecret, ...]  # the current one first
    created_at: datetime
    updated_at: datetime
    disabled_reason: str | None = None
    last_attempt_at: datetime | None = None
    last_status: int | None = None  # the last attempt's HTTP status; None: no answer
    last_delivery_at: datetime | None = None  # the last success
    consecutive_failures: int = 0
    failing_since: datetime | None = None  # the first failure since the last success


@dataclass(frozen=True, kw_only=True)
class Delivery:
    """One event on its way to one subscription.

    ``attempts`` counts the tries of this drive (a re-drive starts the
    schedule again); the attempt log keeps every try. A claim
    (``claim_owner`` until ``claim_until``) is a relay's lease on it.
    """

    id: str
    event_id: str
    subscription_id: str
    tenant: str
    hold_id: str | None
    seq: int | None
    state: DeliveryState
    attempts: int
    next_attempt_at: datetime
    created_at: datetime  # the event's creation: the lag is measured from it
    claim_owner: str | None = None
    claim_until: datetime | None = None
    delivered_at: datetime | None = None
    last_status: int | None = None
    last_error: str | None = None


@dataclass(frozen=True)
class Attempt:
    """One try of a delivery: when, the HTTP status (None: no answer), the error."""

    delivery_id: str
    n: int  # 1, 2, ... over every drive
    at: datetime
    status: int | None
    error: str | None


@dataclass(frozen=True)
class Claim:
    """A delivery a relay claimed, with what it needs to send it."""

    delivery: Delivery
    event: OutboxEvent
    subscription: Subscription


@dataclass(frozen=True, kw_only=True)
class Reply:
    """What a mutating use case answers: the response and whether it was replayed.

    ``created``: the call made a new resource, or replays the first answer of
    one that did. ``accepted``: the call was taken but waits for something
    (a commit waiting for a person's approval, ``approval_id``); nothing is
    recorded under its key, so the same call later gets the outcome.
    """

    created: bool
    body: bytes
    key: str
    replayed: bool
    hold_id: str | None = None
    workflow_id: str | None = None
    takeover: bool = False  # an execution's expired lease was taken over
    completion: bool = False  # an execution's outcome was recorded (not an execution itself)
    preempted: int = 0  # holds this call preempted
    # On a replayed commit or release: the hold's status now, which the first
    # answer (replayed byte for byte) may no longer show.
    hold_status: str | None = None
    accepted: bool = False
    # The approval the answer is about: the one a gated commit waits for, or
    # the one a request opened.
    approval_id: str | None = None
    # On a replayed approval request: the approval's status now.
    approval_status: str | None = None
    # On a fresh create's answer: its hold's attendee ids, which a replay of it
    # is checked against (api/replays.py), so not read back out of ``body``.
    attendees: tuple[str, ...] = ()

    @property
    def outcome(self) -> Literal["fresh", "replayed", "takeover", "completed"]:
        if self.replayed:
            return "replayed"
        if self.completion:
            return "completed"
        return "takeover" if self.takeover else "fresh"


@dataclass(frozen=True)
class WorkflowStats:
    """What the retry-storm watch has recorded of one workflow."""

    tenant: str
    workflow_id: str
    replays: int
    last_replay_at: datetime | None
    storm_at: datetime | None
    storms: int


@dataclass(frozen=True)
class Gauges:
    """Whole-store figures for the operator's dashboard: no tenant data."""

    holds_by_status: dict[str, int]
    outbox_backlog: int  # events pending (not yet delivered everywhere, not dead)
    oldest_overdue: datetime | None  # the expiry of the oldest held hold not yet swept
    executing: int
    oldest_pending_event: datetime | None = None  # the outbox lag is measured from it
    dead_events: int = 0
    # Subscription id -> consecutive failures, for the subscriptions failing now
    # (opaque ids, no tenant name or URL).
    failing_subscriptions: dict[str, int] = field(default_factory=dict)
