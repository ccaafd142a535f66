"""External busy time in a decision: when a mirror is fresh enough, and the window it reads.

A claim (or commit, or availability read) reads the mirror of each bound
attendee. A binding whose mirror is older than the staleness bound, or that
does not cover the claim's window, or whose last read failed, is read again
first, outside any lock: the use case raises :class:`NeedsRefresh`, the
service refreshes those bindings and calls again with them in
:attr:`ExternalPolicy.refreshed` (their mirror is then taken as it is), or,
when a ``last_known`` binding could not be read, in
:attr:`ExternalPolicy.unreachable` (decided on the mirror, and the answer says
so: ``external_stale``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from slotward.engine.calendars import BusyBlock, CalendarBinding, Window
from slotward.engine.rules.timenorm import format_instant

__all__ = [
    "LOOKBACK",
    "ExternalPolicy",
    "ExternalView",
    "NeedsRefresh",
    "needs_refresh",
    "sync_window",
    "view_of",
]

LOOKBACK = timedelta(days=1)  # the mirror starts this long before now


@dataclass(frozen=True)
class ExternalPolicy:
    """How old a mirror may be in a decision, and what this call already refreshed."""

    max_staleness: timedelta = timedelta(seconds=60)
    horizon: timedelta = timedelta(days=60)  # how far ahead the mirror reads
    refreshed: frozenset[str] = frozenset()  # attendees read again by this call
    unreachable: frozenset[str] = frozenset()  # last_known attendees that could not be


class NeedsRefresh(Exception):  # a signal to the service, never an HTTP answer
    """These bindings must be read again before the decision; nothing was written."""

    def __init__(self, bindings: Sequence[CalendarBinding], window: Window) -> None:
        super().__init__(", ".join(b.attendee for b in bindings))
        self.bindings = tuple(bindings)
        self.window = window  # the decision's span: the refresh must cover it


@dataclass(frozen=True)
class ExternalView:
    """What a decision used of external time."""

    blocks: tuple[BusyBlock, ...] = ()
    as_of: datetime | None = None  # the oldest read among the bindings; None: none bound
    stale: bool = False  # some binding could not be read and its mirror was used
    attendees: frozenset[str] = field(default_factory=frozenset)  # the bound ones

    def fields(self) -> dict[str, object]:
        """What an answer carries of it: ``external_as_of`` (and ``external_stale``)."""
        if self.as_of is None and not self.attendees:
            return {}
        out: dict[str, object] = {
            "external_as_of": None if self.as_of is None else format_instant(self.as_of)
        }
        if self.stale:
            out["external_stale"] = True
        return out


def needs_refresh(
    binding: CalendarBinding, start: datetime, end: datetime, now: datetime, policy: ExternalPolicy
) -> bool:
    """Whether ``binding`` must be read again before deciding on ``[start, end)``.

    One this call refreshed is taken however old, but still only if its mirror
    covers the span: a refresh that lost its race to another read keeps that
    read's window, which may not reach a claim beyond the horizon.
    """
    if binding.attendee in policy.unreachable:
        return False
    if binding.attendee not in policy.refreshed:
        if binding.status != "ok" or binding.synced_at is None:
            return True
        if now - binding.synced_at > policy.max_staleness:
            return True
    covers_from, covers_until = binding.covers_from, binding.covers_until
    return covers_from is None or covers_until is None or start < covers_from or end > covers_until


def sync_window(now: datetime, horizon: timedelta, until: datetime | None = None) -> Window:
    """The span a read covers: from a day ago to the horizon, or to ``until`` if later."""
    end = now + horizon
    return Window(now - LOOKBACK, end if until is None or until <= end else until)


def view_of(
    bindings: Sequence[CalendarBinding], blocks: Sequence[BusyBlock], policy: ExternalPolicy
) -> ExternalView:
    """The view of a decision over ``bindings`` and their mirror's ``blocks``."""
    if not bindings:
        return ExternalView()
    reads = [b.synced_at for b in bindings]
    as_of = None if any(r is None for r in reads) else min(r for r in reads if r is not None)
    stale = any(b.attendee in policy.unreachable for b in bindings)
    return ExternalView(tuple(blocks), as_of, stale, frozenset(b.attendee for b in bindings))
