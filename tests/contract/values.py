"""The values the contract tests store: one builder per kind, defaults for the rest.

Ledger records are built here and nowhere else in the suite, so a change of
LedgerRecord's fields touches one line.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from slotward.engine.approvals import Approval, ApprovalStatus, Session
from slotward.engine.model import (
    AuditEntry,
    Delivery,
    Hold,
    HoldStatus,
    LedgerRecord,
    OutboxEvent,
    SealedSecret,
    Subscription,
    SubscriptionStatus,
)

__all__ = [
    "MAX_HOLD",
    "NOW",
    "approval",
    "at",
    "delivery",
    "entry",
    "event",
    "hold",
    "record",
    "session",
    "subscription",
]

NOW = datetime(2030, 10, 1, 9, 0, tzinfo=UTC)
MAX_HOLD = timedelta(hours=24)  # the stores' look-back for overlaps (Policy's default)


def at(minutes: float = 0, *, us: int = 0) -> datetime:
    """An instant ``minutes`` (and ``us`` microseconds) after NOW."""
    return NOW + timedelta(minutes=minutes, microseconds=us)


def hold(
    hold_id: str,
    *,
    tenant: str = "acme",
    attendees: tuple[str, ...] = ("att_a",),
    start: datetime | None = None,
    end: datetime | None = None,
    status: HoldStatus = HoldStatus.HELD,
    expires_at: datetime | None = None,
    workflow_id: str = "wf",
    intent_fp: str = "i" * 64,
    **changes: Any,
) -> Hold:
    """A held hold of one attendee, an hour from now for 30 minutes, expiring in 5."""
    first = start or at(60)
    made = Hold(
        id=hold_id,
        key=f"key-{hold_id}",
        tenant=tenant,
        workflow_id=workflow_id,
        agent_id="agent",
        attendees=attendees,
        start=first,
        end=end or first + timedelta(minutes=30),
        title="Sync",
        description=None,
        priority=50,
        status=status,
        expires_at=expires_at or at(5),
        token=1,
        intent_fp=intent_fp,
        created_at=NOW,
        updated_at=NOW,
        audit_seq=1,
    )
    return replace(made, **changes)


def record(
    key: str,
    *,
    tenant: str = "acme",
    fingerprint: str = "f" * 64,
    created_at: datetime = NOW,
    expires_at: datetime | None = None,
    **changes: Any,
) -> LedgerRecord:
    """A succeeded hold record that created its hold, kept for 72 hours."""
    made = LedgerRecord(
        tenant=tenant,
        key=key,
        fingerprint=fingerprint,
        state="succeeded",
        created=True,
        body=b'{"id":"hold_1"}',
        created_at=created_at,
        expires_at=expires_at or created_at + timedelta(hours=72),
        hold_id="hold_1",
    )
    return replace(made, **changes)


def entry(seq: int, *, tenant: str = "acme", prev: str | None = None) -> AuditEntry:
    """The ``seq``-th audit entry of ``tenant``; its hash names it (the store checks none)."""
    return AuditEntry(
        tenant=tenant,
        seq=seq,
        at=at(seq),
        actor="agent",
        action="hold.create",
        key=f"key-{seq}",
        hold_id=f"hold_{seq}",
        outcome="fresh",
        prev_hash=prev or f"{tenant}-{seq - 1}".ljust(64, "0"),
        hash=f"{tenant}-{seq}".ljust(64, "0"),
    )


def event(
    event_id: str,
    *,
    tenant: str = "acme",
    hold_id: str | None = "hold_1",
    seq: int | None = 1,
    created_at: datetime = NOW,
    **changes: Any,
) -> OutboxEvent:
    """A pending event of ``hold_id`` (its ``seq``-th), not yet fanned out."""
    made = OutboxEvent(
        event_id, tenant, "hold.created", created_at, {"hold_id": hold_id}, hold_id, seq=seq
    )
    return replace(made, **changes)


def subscription(
    subscription_id: str,
    *,
    tenant: str = "acme",
    status: SubscriptionStatus = "active",
    **changes: Any,
) -> Subscription:
    """An active subscription to every hold event, with one current secret and one rotated out."""
    made = Subscription(
        id=subscription_id,
        tenant=tenant,
        url=f"https://hooks.example.com/{subscription_id}",
        topics=("hold.*",),
        description=None,
        status="active",
        secrets=(SealedSecret("sealed-current"), SealedSecret("sealed-old", at(60))),
        created_at=NOW,
        updated_at=NOW,
    )
    return replace(made, status=status, **changes)


def delivery(
    delivery_id: str,
    event_id: str,
    subscription_id: str,
    *,
    tenant: str = "acme",
    hold_id: str | None = "hold_1",
    seq: int | None = 1,
    due: datetime = NOW,
    **changes: Any,
) -> Delivery:
    """A pending delivery, due ``due``, never tried."""
    made = Delivery(
        id=delivery_id,
        event_id=event_id,
        subscription_id=subscription_id,
        tenant=tenant,
        hold_id=hold_id,
        seq=seq,
        state="pending",
        attempts=0,
        next_attempt_at=due,
        created_at=NOW,
    )
    return replace(made, **changes)


def approval(
    approval_id: str,
    *,
    tenant: str = "acme",
    status: ApprovalStatus = ApprovalStatus.PENDING,
    expires_at: datetime | None = None,
    **changes: Any,
) -> Approval:
    """A pending approval of no hold asked for now, expiring in a day."""
    made = Approval(
        id=approval_id,
        tenant=tenant,
        key=f"key-{approval_id}",
        workflow_id="wf",
        requested_by="agent",
        summary="Refund 120 EUR to order 8812",
        evidence={"order": 8812, "amount": 120.5},
        action={"type": "refund", "order": 8812},
        status=status,
        created_at=NOW,
        updated_at=NOW,
        expires_at=expires_at or at(24 * 60),
        audit_seq=1,
    )
    return replace(made, **changes)


def session(
    token_hash: str, *, tenant: str = "acme", expires_at: datetime | None = None
) -> Session:
    """A dashboard session of key ``key_1`` signed in now, for 12 hours."""
    return Session(
        token_hash=token_hash,
        key_id="key_1",
        tenant=tenant,
        created_at=NOW,
        expires_at=expires_at or at(12 * 60),
    )
