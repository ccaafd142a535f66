"""Who gets a contested slot (DESIGN section 5), and where else to go.

A claim meets every blocking hold of its attendees that overlaps it. Committed
holds and provider busy time always win; live holds yield only to a claim of
strictly higher priority that is not their very intent.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from slotward.engine.calendars import BusyBlock
from slotward.engine.model import Hold, HoldStatus
from slotward.engine.rules.timenorm import LATEST, format_instant

__all__ = [
    "Blocked",
    "Claim",
    "Decision",
    "Free",
    "PreemptLosers",
    "Span",
    "decide",
    "find_alternatives",
    "free_slots",
    "merge_intervals",
    "nearest_free",
]

GRID = timedelta(minutes=15)
HORIZON = timedelta(days=14)
# How far around a refused claim its alternatives are first looked for: far
# enough for a busy day's free slots, near enough not to read its fortnight.
FIRST_REACH = timedelta(hours=6)

Span = tuple[datetime, datetime]


@dataclass(frozen=True)
class Claim:
    attendees: tuple[str, ...]
    start: datetime
    end: datetime
    priority: int
    intent_fp: str


@dataclass(frozen=True)
class Free:
    pass


@dataclass(frozen=True)
class PreemptLosers:
    """The decision: the claim wins; these live holds of lower priority yield to it."""

    losers: tuple[Hold, ...]


@dataclass(frozen=True)
class Blocked:
    conflicts: tuple[dict[str, Any], ...]
    retry_after: int | None


Decision = Free | PreemptLosers | Blocked


def decide(
    claim: Claim, blockers: Sequence[Hold], now: datetime, external: Sequence[BusyBlock] = ()
) -> Decision:
    """Apply the three rules of DESIGN section 5 to the overlapping holds and
    the attendees' external busy time (``external``, from their calendars)."""
    live = [h for h in blockers if h.blocks_at(now) and _overlaps(h, claim)]
    outside = sorted(
        {(b.start, b.end, b.attendee) for b in external if _meets(b, claim)},
    )
    if not live and not outside:
        return Free()
    held = [h for h in live if h.status is HoldStatus.HELD]
    if not outside and len(held) == len(live) and all(_yields(h, claim) for h in held):
        return PreemptLosers(tuple(held))
    conflicts = tuple(c for h in live for c in _describe(h, claim)) + tuple(
        {"attendee": a, "start": format_instant(s), "end": format_instant(e), "kind": "external"}
        for s, e, a in outside
    )
    retry_after = None
    if not outside and len(held) == len(live):
        last = max(h.expires_at for h in held)
        retry_after = max(1, math.ceil((last - now).total_seconds()))
    return Blocked(conflicts, retry_after)


def _overlaps(hold: Hold, claim: Claim) -> bool:
    shares = not set(hold.attendees).isdisjoint(claim.attendees)
    return shares and hold.start < claim.end and hold.end > claim.start


def _meets(block: BusyBlock, claim: Claim) -> bool:
    return block.attendee in claim.attendees and block.start < claim.end and block.end > claim.start


def _yields(hold: Hold, claim: Claim) -> bool:
    return claim.priority > hold.priority and hold.intent_fp != claim.intent_fp


def _describe(hold: Hold, claim: Claim) -> list[dict[str, Any]]:
    kind = "committed" if hold.status is HoldStatus.COMMITTED else "held"
    out = []
    for attendee in sorted(set(hold.attendees).intersection(claim.attendees)):
        item: dict[str, Any] = {
            "attendee": attendee,
            "start": format_instant(hold.start),
            "end": format_instant(hold.end),
            "kind": kind,
            "agent": hold.agent_id,
            "priority": hold.priority,
            "audit_seq": hold.audit_seq,
            "same_intent": hold.intent_fp == claim.intent_fp,
        }
        if kind == "held":
            item["expires_at"] = format_instant(hold.expires_at)
        out.append(item)
    return out


def find_alternatives(
    busy: Iterable[tuple[datetime, datetime]],
    *,
    start: datetime,
    duration: timedelta,
    now: datetime,
    count: int = 3,
    grid: timedelta = GRID,
    horizon: timedelta = HORIZON,
) -> list[tuple[datetime, datetime]]:
    """The nearest free slots of ``duration`` around ``start``.

    Candidates lie on the ``grid`` (aligned to the epoch, UTC), start after
    ``now``, within ``horizon`` of ``start``, and do not overlap ``busy`` or each
    other. Nearest first; ties go to the earlier slot.
    """
    taken = merge_intervals(busy)
    found: list[tuple[datetime, datetime]] = []
    for candidate in _candidates(start, now, grid, horizon):
        slot = (candidate, candidate + duration)
        if slot[1] <= LATEST and _is_free(slot, taken):
            found.append(slot)
            taken = merge_intervals([*taken, slot])
            if len(found) == count:
                break
    return sorted(found)


def nearest_free(
    read: Callable[[datetime, datetime], Iterable[Span]],
    *,
    start: datetime,
    duration: timedelta,
    now: datetime,
    count: int = 3,
    grid: timedelta = GRID,
    horizon: timedelta = HORIZON,
    reach: timedelta = FIRST_REACH,
) -> list[Span]:
    """:func:`find_alternatives` over the busy time ``read`` gives, read only as far
    out as the answer needs.

    ``read(lo, hi)`` gives the busy spans overlapping [lo, hi). The search runs
    within ``reach`` of ``start`` first, over the spans read around it: a slot
    found there is free whatever lies further out, and nearer candidates come
    first, so ``count`` slots found there are the whole horizon's answer. Else
    the reach doubles, up to ``horizon``, and only the two strips it adds are
    read. On a full fortnight, reading every hold of it was most of a refusal.
    """
    end = start + duration
    reach = min(reach, horizon)
    busy = list(read(start - reach, end + reach))
    while True:
        found = find_alternatives(
            busy, start=start, duration=duration, now=now, count=count, grid=grid, horizon=reach
        )
        if len(found) == count or reach >= horizon:
            return found
        wider = min(2 * reach, horizon)
        busy += read(start - wider, start - reach)
        busy += read(end + reach, end + wider)
        reach = wider


def _candidates(
    start: datetime, now: datetime, grid: timedelta, horizon: timedelta
) -> Iterator[datetime]:
    """Grid instants after ``now`` within ``horizon`` of ``start``, nearest first.

    Ties go to the earlier instant. Walked outward from ``start`` one step at
    a time and lazily: a conflict needs a few alternatives, and listing and
    sorting the 2,700 instants of a 14-day horizon first was most of what a
    refused claim cost.
    """
    epoch = datetime(1970, 1, 1, tzinfo=start.tzinfo)
    below = epoch + grid * math.floor((start - epoch) / grid)  # at or before start
    above = below + grid  # after start
    while True:
        down, up = start - below, above - start
        if down > horizon and up > horizon:
            return
        if down <= horizon and (up > horizon or down <= up):
            if below > now:
                yield below
            below -= grid
        else:
            if above > now:
                yield above
            above += grid


def merge_intervals(
    intervals: Iterable[tuple[datetime, datetime]],
) -> list[tuple[datetime, datetime]]:
    merged: list[tuple[datetime, datetime]] = []
    for s, e in sorted(intervals):
        if merged and s <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], e))
        else:
            merged.append((s, e))
    return merged


def _is_free(slot: tuple[datetime, datetime], taken: list[tuple[datetime, datetime]]) -> bool:
    i = bisect.bisect_left(taken, (slot[1],))
    # Only the intervals starting before the slot ends can overlap it; since they
    # are merged and sorted, the last of them is the only candidate.
    return i == 0 or taken[i - 1][1] <= slot[0]


def free_slots(
    busy: Iterable[tuple[datetime, datetime]],
    *,
    start: datetime,
    end: datetime,
    duration: timedelta,
    now: datetime,
    count: int,
    grid: timedelta = GRID,
) -> list[tuple[datetime, datetime]]:
    """The earliest free, non-overlapping grid slots of ``duration`` inside [start, end)."""
    taken = merge_intervals(busy)
    epoch = datetime(1970, 1, 1, tzinfo=start.tzinfo)
    candidate = epoch + grid * math.ceil((max(start, now) - epoch) / grid)
    found: list[tuple[datetime, datetime]] = []
    while candidate + duration <= end and len(found) < count:
        slot = (candidate, candidate + duration)
        if candidate > now and _is_free(slot, taken):
            found.append(slot)
            taken = merge_intervals([*taken, slot])
        candidate += grid
    return found
