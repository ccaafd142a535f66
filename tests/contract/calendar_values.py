"""The calendar values the contract tests store: a binding, a busy block, a write."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from slotward.engine.calendars import BusyBlock, CalendarBinding, CalendarWrite
from tests.contract.values import NOW, at

__all__ = ["binding", "block", "write"]


def binding(attendee: str = "att_a", *, tenant: str = "acme", **changes: Any) -> CalendarBinding:
    """A CalDAV binding never read yet, its password sealed."""
    made = CalendarBinding(
        tenant=tenant,
        attendee=attendee,
        provider="caldav",
        url=f"https://dav.example.com/{attendee}/",
        username=attendee,
        password="sealed-password",
        timezone="Europe/Berlin",
        on_unavailable="last_known",
        created_at=NOW,
        updated_at=NOW,
    )
    return replace(made, **changes)


def block(
    start: float,
    end: float,
    *,
    source: str = "a.ics",
    attendee: str = "att_a",
    tenant: str = "acme",
) -> BusyBlock:
    """Busy from ``start`` to ``end`` minutes after NOW."""
    return BusyBlock(tenant, attendee, source, at(start), at(end))


def write(
    hold_id: str = "hold_1",
    attendee: str = "att_a",
    *,
    tenant: str = "acme",
    version: int = 1,
    due: float = 0,
    **changes: Any,
) -> CalendarWrite:
    """A pending put of a tentative event an hour from now, due ``due`` minutes after NOW."""
    made = CalendarWrite(
        tenant=tenant,
        hold_id=hold_id,
        attendee=attendee,
        uid=f"{hold_id}@slotward",
        action="put",
        status="TENTATIVE",
        start=at(60),
        end=at(90),
        summary="Sync",
        description=f"version {version}",
        version=version,
        state="pending",
        attempts=0,
        next_attempt_at=at(due),
        updated_at=NOW,
    )
    return replace(made, **changes)
