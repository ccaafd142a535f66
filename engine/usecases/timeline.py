"""Read use case: the dashboard's timeline of a window, one row per attendee.

Each row holds the attendee's holds of any status overlapping the window (as
readers see them now: a held hold past its expiry reads expired) and the
external busy time of its bound calendar as the mirror last read it. The
timeline never reads a calendar itself: a person looking at the dashboard
must not cost a provider call, and ``external_as_of`` says how old the
mirror is.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from slotward.engine.calendars import BusyBlock, CalendarBinding
from slotward.engine.model import Hold, Principal
from slotward.engine.ports import UnitOfWork
from slotward.engine.rules.attendees import AttendeeRef
from slotward.engine.rules.conflicts import merge_intervals
from slotward.engine.rules.documents import hold_document
from slotward.engine.rules.policy import Policy
from slotward.engine.rules.timenorm import format_instant
from slotward.engine.usecases.reads import check_window, resolve_for_reading

__all__ = ["MAX_HOLDS", "MAX_PLACEMENTS", "TimelineQuery", "timeline"]

MAX_HOLDS = 2000  # holds read for one window
# Hold documents in one answer (a hold is in the row of each of its attendees):
# bounds the answer's size however many attendees the holds have.
MAX_PLACEMENTS = 5000


@dataclass(frozen=True)
class TimelineQuery:
    """The window ``[start, end)`` and the attendees whose rows must be there."""

    principal: Principal
    start: datetime
    end: datetime
    attendees: tuple[AttendeeRef, ...] = ()


def timeline(
    uow: UnitOfWork, query: TimelineQuery, policy: Policy, now: datetime
) -> dict[str, Any]:
    """The timeline of ``query``'s window: ``{"from", "to", "attendees", "truncated"}``.

    The rows are the attendees of the window's holds and those asked for (an
    unknown email has its would-be id and no holds), by id. ``truncated``:
    the window holds more than one answer shows (the latest are left out).
    """
    check_window(query.start, query.end, policy)
    tenant = query.principal.tenant
    earliest = query.start - policy.max_hold  # no hold overlapping the window began before
    with uow:
        asked = set(resolve_for_reading(uow, tenant, query.attendees).ids)
        holds = uow.holds.window(tenant, query.start, query.end, earliest, MAX_HOLDS + 1)
        shown, truncated = _placed(holds)
        ids = sorted(asked | {a for h in shown for a in h.attendees})
        entries = {e.id: e for e in uow.directory.entries(tenant, ids)}
        bindings = {b.attendee: b for b in uow.calendars.for_attendees(tenant, ids)}
        blocks = (
            uow.mirror.overlapping(tenant, sorted(bindings), query.start, query.end)
            if bindings
            else []
        )
    busy: defaultdict[str, list[BusyBlock]] = defaultdict(list)
    for block in blocks:
        busy[block.attendee].append(block)
    by_attendee: defaultdict[str, list[dict[str, Any]]] = defaultdict(list)
    for hold in shown:
        doc = hold_document(hold, now)
        for attendee in hold.attendees:
            by_attendee[attendee].append(doc)
    rows = [
        {
            "id": attendee,
            "name": entries[attendee].name if attendee in entries else None,
            "emails": list(entries[attendee].emails) if attendee in entries else [],
            "holds": by_attendee[attendee],
            **_external(bindings.get(attendee), busy[attendee]),
        }
        for attendee in ids
    ]
    return {
        "from": format_instant(query.start),
        "to": format_instant(query.end),
        "attendees": rows,
        "truncated": truncated,
    }


def _placed(holds: list[Hold]) -> tuple[list[Hold], bool]:
    """The holds one answer shows, in start order, and whether some were left out."""
    shown: list[Hold] = []
    placements = 0
    for hold in holds[:MAX_HOLDS]:
        placements += len(hold.attendees)
        if placements > MAX_PLACEMENTS:
            return shown, True
        shown.append(hold)
    return shown, len(holds) > MAX_HOLDS


def _external(binding: CalendarBinding | None, blocks: list[BusyBlock]) -> dict[str, Any]:
    """A row's external busy time (merged where blocks overlap) and how old it is."""
    if binding is None:
        return {"external": [], "external_as_of": None, "calendar": None}
    spans = merge_intervals((b.start, b.end) for b in blocks)
    synced = binding.synced_at
    return {
        "external": [{"start": format_instant(s), "end": format_instant(e)} for s, e in spans],
        "external_as_of": None if synced is None else format_instant(synced),
        "calendar": binding.status,
    }
