"""Use cases of the mirror: claim bindings due a read, store what a read found.

A read of a calendar happens outside any transaction (api/providers.py). What
it found is stored in one transaction, compare-and-set on the binding's
``version``: two reads racing (the sync worker's and a claim's refresh) never
mix, and the one that lost leaves the mirror to the winner. slotward's own
events never enter the mirror (engine/rules/calendar_events.py ``is_own``).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from slotward.engine.calendars import (
    BusyBlock,
    BusyRead,
    CalendarBinding,
    CalendarInvalid,
    ProviderError,
    Window,
)
from slotward.engine.ports import Clock, UnitOfWork
from slotward.engine.rules.calendar_events import is_own
from slotward.engine.rules.external import LOOKBACK, ExternalPolicy, sync_window

__all__ = [
    "MAX_BACKOFF",
    "claim_syncs",
    "read_window",
    "store_failure",
    "store_read",
]

MAX_BACKOFF = timedelta(minutes=10)  # a failing calendar is read again at least this often
_SLACK = timedelta(days=1)  # a mirror's window is reused while it reaches this near the horizon


def _end_of_day(instant: datetime) -> datetime:
    """The next UTC midnight at or after ``instant``."""
    day = instant.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return day if day == instant else day + timedelta(days=1)


def read_window(
    binding: CalendarBinding, now: datetime, policy: ExternalPolicy, need: Window | None = None
) -> Window:
    """The window a read of ``binding`` covers.

    The binding's current one while it still fits: it covers ``need``, began
    about a day ago at most, reaches within a day of the horizon and no
    further than two days past it (or than ``need``, a claim beyond the
    horizon). Adapters read incrementally only within the window their cursor
    was made for, so it moves about once a day, not on every read; a window a
    far claim stretched shrinks back on the next read that does not need it.
    Otherwise: a day ago to a day past the horizon, or to ``need``'s end (or,
    for a decision's read, to the current window's if that reaches further).
    """
    start, until = binding.covers_from, binding.covers_until
    if start is not None and until is not None:
        longest = now + policy.horizon + 2 * _SLACK
        if need is not None:
            longest = max(longest, need.end)
        fits = (
            start >= now - LOOKBACK - _SLACK
            and now + policy.horizon - _SLACK <= until <= longest
            and (need is None or (start <= need.start and need.end <= until))
        )
        if fits:
            return Window(start, until)
    # To the end of the claim's day (UTC): claims racing for one calendar on one
    # day then read one window, and whichever read is stored covers them all.
    reach = None if need is None else _end_of_day(need.end)
    if reach is not None and until is not None and until > reach:
        # A decision's read never pulls back what another far claim stretched:
        # claims racing for one calendar with different ends would otherwise
        # each read it to their own end, and each find the others' read short.
        reach = until
    return sync_window(now, policy.horizon + _SLACK, reach)


def claim_syncs(
    uow: UnitOfWork, clock: Clock, owner: str, lease: timedelta, limit: int
) -> list[CalendarBinding]:
    """Claim up to ``limit`` bindings due a read, for ``owner`` during ``lease``.

    No tenant lock: a claim marks bindings for one sync worker; no decision or
    chain of a tenant reads the claim.
    """
    with uow:
        now = clock.now()
        claimed = uow.calendars.claim_due(owner, now, now + lease, limit)
        uow.commit()
        return claimed


def store_read(
    uow: UnitOfWork,
    binding: CalendarBinding,
    started: datetime,
    window: Window,
    read: BusyRead,
    interval: timedelta,
) -> CalendarBinding | None:
    """Store ``read`` (begun at ``started`` over ``window``) as the binding's mirror.

    Returns the binding as stored, or None when another read stored first (or
    the binding was removed or replaced meanwhile): nothing is written then.

    No tenant lock: the mirror is the calendar's, not a decision of the
    tenant's; a claim deciding meanwhile reads the mirror before or after.
    """
    with uow:
        covers = (window.start, window.end) if read.full and not read.unchanged else None
        if covers is None:
            covers = (binding.covers_from or window.start, binding.covers_until or window.end)
        stored = replace(
            binding,
            status="ok",
            synced_at=started,
            covers_from=covers[0],
            covers_until=covers[1],
            cursor=read.cursor,
            version=binding.version + 1,
            error=None,
            error_at=None,
            failures=0,
            next_sync_at=started + interval,
            sync_owner=None,
            sync_until=None,
        )
        if not uow.calendars.store_sync(stored, binding.version):
            return None
        _apply(uow, binding, read)
        uow.commit()
        return stored


def _apply(uow: UnitOfWork, binding: CalendarBinding, read: BusyRead) -> None:
    if read.unchanged:
        return
    tenant, attendee = binding.tenant, binding.attendee
    blocks = [
        BusyBlock(tenant, attendee, b.source, b.start, b.end)
        for b in read.busy
        if not is_own(b.uid) and b.end > b.start
    ]
    if read.full:
        uow.mirror.replace(tenant, attendee, blocks)
        return
    changed: dict[str, list[BusyBlock]] = defaultdict(list)
    for source in read.changed:
        changed[source] = []
    for block in blocks:
        changed[block.source].append(block)
    uow.mirror.patch(tenant, attendee, changed, [s for s in read.removed if s not in changed])


def store_failure(
    uow: UnitOfWork,
    binding: CalendarBinding,
    started: datetime,
    error: ProviderError,
    interval: timedelta,
) -> CalendarBinding | None:
    """Record that a read of ``binding`` failed; the mirror stays as it was.

    The binding is in error (GET shows why) and is read again after a backoff
    that grows with the failures, up to :data:`MAX_BACKOFF`. An invalid
    calendar is not retried sooner than the interval. None when another read
    stored first.

    No tenant lock: the binding's sync state is the calendar's, not a decision
    of the tenant's.
    """
    with uow:
        failures = binding.failures + 1
        wait = min(MAX_BACKOFF, interval * (2 ** min(failures - 1, 10)))
        if isinstance(error, CalendarInvalid):
            wait = max(wait, interval)
        stored = replace(
            binding,
            status="error",
            version=binding.version + 1,
            error=str(error)[:500],
            error_at=started,
            failures=failures,
            next_sync_at=started + wait,
            sync_owner=None,
            sync_until=None,
        )
        if not uow.calendars.store_sync(stored, binding.version):
            return None
        uow.commit()
        return stored
