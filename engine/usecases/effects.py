"""What every state change writes beside itself: an audit entry and an outbox event."""

from __future__ import annotations

from datetime import datetime

from slotward.engine.model import Hold, OutboxEvent
from slotward.engine.ports import IdGenerator, UnitOfWork
from slotward.engine.rules.audit import AuditKey, next_entry
from slotward.engine.rules.documents import hold_document

__all__ = ["audit", "emit"]


def audit(
    uow: UnitOfWork,
    tenant: str,
    actor: str,
    now: datetime,
    action: str,
    key: str | None,
    hold_id: str | None,
    outcome: str,
    *,
    audit_key: AuditKey | None,
) -> int:
    """Append to the tenant's chain (an HMAC chain under ``audit_key``); return the new seq.

    ``audit_key`` has no default: a call that forgot it would write plain entries
    while the server holds a key (mypy catches the omission).
    """
    entry = next_entry(
        uow.audit.head(tenant),
        tenant=tenant,
        at=now,
        actor=actor,
        action=action,
        key=key,
        hold_id=hold_id,
        outcome=outcome,
        audit_key=audit_key,
    )
    uow.audit.append(entry)
    return entry.seq


def emit(
    uow: UnitOfWork,
    ids: IdGenerator,
    hold: Hold,
    event_type: str,
    now: datetime,
    extra: dict[str, object] | None = None,
    *,
    document: dict[str, object] | None = None,
    unwatched: bool = False,
) -> None:
    """Queue ``event_type`` for delivery, in the same transaction as the change.

    ``hold`` is the hold after the change: its ``event_seq`` is this event's
    place in the hold's sequence. ``document``: its ``hold_document`` at
    ``now``, when the caller has built it already. ``unwatched``: read in this
    transaction, under a lock a new subscription or binding of the tenant
    waits for, the tenant has no active subscription and no attendee of the
    hold a calendar: the event is written as the relay would leave it, fanned
    out to nobody and delivered (engine/usecases/relay.py ``_fan_out``), so
    the relay never reads it.
    """
    doc = hold_document(hold, now) if document is None else document
    payload = {"hold": doc, **(extra or {})}
    event = OutboxEvent(
        ids.new_id("evt"), hold.tenant, event_type, now, payload, hold.id, seq=hold.event_seq,
        state="delivered" if unwatched else "pending", fanned=unwatched,
        settled_at=now if unwatched else None,
    )  # fmt: skip
    uow.outbox.add(event)
