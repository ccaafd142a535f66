"""slotward's own event of a hold in an attendee's calendar: its UID, its text, its state.

A hold's outbox events decide what its calendar event should be:
``hold.created`` puts it ``TENTATIVE``, ``hold.committed`` puts it
``CONFIRMED``, ``hold.released``, ``hold.expired`` and ``hold.preempted``
delete it. The UID is derived from the hold id alone, so every redelivery
and every attendee's calendar names the same event, and a busy read can
tell slotward's own events from external time (:func:`is_own`).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from slotward.engine.calendars import CalendarEvent, CalendarWrite, EventStatus, WriteAction
from slotward.engine.model import Hold, HoldStatus, OutboxEvent
from slotward.engine.rules.documents import hold_document

__all__ = [
    "UID_SUFFIX",
    "WRITE_EVENTS",
    "calendar_event",
    "event_uid",
    "is_own",
    "write_for_event",
    "write_for_hold",
]

UID_SUFFIX = "@slotward"
# Event type -> what it asks of the calendar event.
WRITE_EVENTS: dict[str, tuple[WriteAction, EventStatus | None]] = {
    "hold.created": ("put", "TENTATIVE"),
    "hold.committed": ("put", "CONFIRMED"),
    "hold.released": ("delete", None),
    "hold.expired": ("delete", None),
    "hold.preempted": ("delete", None),
}


def event_uid(hold_id: str) -> str:
    """The UID of a hold's calendar event, the same in every calendar and on every try."""
    return f"{hold_id}{UID_SUFFIX}"


def is_own(uid: str) -> bool:
    """Whether ``uid`` names one of slotward's own events: never external busy time."""
    return uid.startswith("hold_") and uid.endswith(UID_SUFFIX)


def _text(doc: dict[str, Any], status: EventStatus | None) -> tuple[str, str]:
    summary = doc.get("title") or "Held by slotward"
    who = f"agent {doc['agent_id']} (workflow {doc['workflow_id']})"
    if status == "CONFIRMED":
        description = f"Booked by {who} through slotward, hold {doc['id']}."
    else:
        description = (
            f"Held for {who} until {doc['expires_at']} by slotward, hold {doc['id']}; "
            "tentative until the agent commits it."
        )
    return summary, description


def write_for_event(event: OutboxEvent, attendee: str, now: datetime) -> CalendarWrite | None:
    """What ``event`` asks of the hold's event in ``attendee``'s calendar; None for an
    event that asks nothing (not a hold's, or not one of :data:`WRITE_EVENTS`)."""
    wanted = WRITE_EVENTS.get(event.type)
    doc = event.payload.get("hold")
    if wanted is None or not isinstance(doc, dict) or event.seq is None:
        return None
    action, status = wanted
    return _write(event.tenant, doc, attendee, action, status, event.seq, now)


def write_for_hold(hold: Hold, attendee: str, now: datetime) -> CalendarWrite | None:
    """The write that brings a calendar bound after the fact up to ``hold``'s state
    now: a put for a live hold, None for one that is over."""
    status = hold.status_at(now)
    put: EventStatus
    if status is HoldStatus.HELD:
        doc, put = hold_document(hold, now), "TENTATIVE"
    elif status is HoldStatus.COMMITTED:
        doc, put = hold_document(hold, now), "CONFIRMED"
    else:
        return None
    return _write(hold.tenant, doc, attendee, "put", put, hold.event_seq, now)


def _write(
    tenant: str,
    doc: dict[str, Any],
    attendee: str,
    action: WriteAction,
    status: EventStatus | None,
    version: int,
    now: datetime,
) -> CalendarWrite:
    summary, description = _text(doc, status)
    return CalendarWrite(
        tenant=tenant,
        hold_id=str(doc["id"]),
        attendee=attendee,
        uid=event_uid(str(doc["id"])),
        action=action,
        status=status,
        start=datetime.fromisoformat(str(doc["start"])),
        end=datetime.fromisoformat(str(doc["end"])),
        summary=summary,
        description=description,
        version=version,
        state="pending",
        attempts=0,
        next_attempt_at=now,
        updated_at=now,
    )


def calendar_event(write: CalendarWrite) -> CalendarEvent:
    """The event a put writes."""
    return CalendarEvent(
        uid=write.uid,
        start=write.start,
        end=write.end,
        summary=write.summary,
        description=write.description,
        status=write.status or "TENTATIVE",
        sequence=write.version,
    )
