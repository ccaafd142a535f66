"""iCalendar in and out: the busy time of a calendar's data, and slotward's own event.

Every adapter reads its calendar's data here (:func:`read_busy`): each VEVENT
instance overlapping a window, recurrences expanded by ``recurring-ical-events``
(RRULE, RDATE, EXDATE, RECURRENCE-ID overrides, VTIMEZONE across DST), that
blocks: not ``TRANSP:TRANSPARENT``, not ``STATUS:CANCELLED`` (a tentative event
blocks). All-day (DATE) events block the whole local day(s) and floating times
are read in the binding's time zone. slotward's own events are read too (each
block carries its UID): telling them from external time is the caller's
(engine/rules/calendar_events.py ``is_own``).

Time zones. A TZID is known when the file defines it (a VTIMEZONE) or when
icalendar names it (an IANA name, a Windows name, a vendor-prefixed IANA name);
anything else is unknown and the calendar is :class:`CalendarInvalid`, because
icalendar 7 silently reads a time with an unknown TZID as floating. A
VTIMEZONE that names an IANA zone is not read: the IANA rules are (icalendar's
choice, and the safer one: a calendar's copy of a zone's rules may be stale).
icalendar keeps the VTIMEZONEs it has seen in a process-wide cache where the
first definition of a TZID wins: one calendar's VTIMEZONE would then resolve
(or redefine) another calendar's TZID. So every read starts and ends with that
cache emptied, under one lock (reads are CPU-bound: they would queue on the GIL
anyway). Every use of icalendar in slotward goes through this module for that
reason: a parse elsewhere, outside the lock, would fill the cache again.

Input is hostile: the data is capped (:data:`MAX_BYTES`), the work of expanding
a recurrence is estimated before it is done (:data:`MAX_STEPS`: a FREQ=SECONDLY
rule from 1900 would otherwise run for hours) and the instances of one read are
capped (:data:`MAX_INSTANCES`). icalendar opens no network connection.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta, tzinfo
from typing import Any, Final, TypeVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import icalendar
import recurring_ical_events  # type: ignore[import-untyped]  # it ships no py.typed
from icalendar.timezone import tzp

from slotward.engine.calendars import Busy, CalendarEvent, CalendarInvalid, Window

__all__ = [
    "MAX_BYTES",
    "MAX_INSTANCES",
    "MAX_STEPS",
    "PRODID",
    "Budget",
    "in_parser",
    "read_busy",
    "render_event",
    "stored_state",
]

MAX_BYTES: Final = 10 * 1024 * 1024
MAX_INSTANCES: Final = 50_000
# Steps of recurrence iteration a read may cost (dateutil takes about 3 us a step).
MAX_STEPS: Final = 1_000_000
PRODID: Final = "-//slotward//EN"

# The properties that carry a date-time with a TZID parameter in a VEVENT.
_TIMED: Final = ("DTSTART", "DTEND", "RECURRENCE-ID", "EXDATE", "RDATE")
_PERIOD: Final = {
    "SECONDLY": 1,
    "MINUTELY": 60,
    "HOURLY": 3600,
    "DAILY": 86400,
    "WEEKLY": 7 * 86400,
    "MONTHLY": 31 * 86400,
    "YEARLY": 366 * 86400,
}
_DAYS_IN_PERIOD: Final = {"WEEKLY": 7, "MONTHLY": 31, "YEARLY": 366}
_DAY_PARTS: Final = ("BYDAY", "BYMONTHDAY", "BYYEARDAY", "BYWEEKNO", "BYMONTH")
# A finer part multiplies the instances of each step when the rule is coarser.
_TIME_PARTS: Final = (("BYHOUR", 3600), ("BYMINUTE", 60), ("BYSECOND", 1))
_WIDEN: Final = timedelta(days=2)  # floating and all-day times are up to 26 h off UTC

T = TypeVar("T")
_LOCK = threading.Lock()
# Calendars are parsed on threads of their own, not the default executor that
# other work of the server (key checks) shares: a slow hostile calendar must
# not make requests wait. One at a time would do (_LOCK serializes the parses);
# a second thread reads files meanwhile.
_PARSERS = concurrent.futures.ThreadPoolExecutor(max_workers=2, thread_name_prefix="ical")


@dataclass
class Budget:
    """What one read of a calendar may still spend, across all its resources.

    A CalDAV read parses each resource (member) of a collection apart: with a
    budget per resource, many small dense ones would add up to unbounded
    work. Every :func:`read_busy` call of one read takes from the same budget.
    """

    instances: int = MAX_INSTANCES
    steps: int = MAX_STEPS


async def in_parser(fn: Callable[..., T], *args: Any) -> T:
    """Run ``fn(*args)`` (a parse, a file read) on the calendar threads, off the loop."""
    return await asyncio.get_running_loop().run_in_executor(_PARSERS, fn, *args)


# What icalendar and recurring-ical-events raise on data they cannot read: given
# hostile data, a library may fail in any of these ways, and each means the same.
_UNREADABLE: Final = (
    ValueError,
    TypeError,
    KeyError,
    IndexError,
    AttributeError,
    OverflowError,
    RecursionError,
    UnicodeError,
)


def read_busy(
    data: bytes,
    window: Window,
    timezone: str,
    *,
    source: str | None = None,
    budget: Budget | None = None,
) -> list[Busy]:
    """The blocking instances of ``data``'s events overlapping ``window``, in UTC.

    ``timezone`` (an IANA name) reads all-day and floating times. ``source`` is
    every block's source; None: each block's source is its event's UID.
    Raises :class:`CalendarInvalid` for data that does not parse, an unknown
    TZID, or data or a recurrence past the caps (``budget``: the caps left to
    the read this call is part of; None: a read of its own). Sorted by start,
    then UID.
    """
    budget = budget if budget is not None else Budget()
    if len(data) > MAX_BYTES:
        raise CalendarInvalid(f"the calendar is larger than {MAX_BYTES} bytes")
    zone = _zone(timezone)
    with _LOCK, warnings.catch_warnings():
        # icalendar warns on guesses (a vendor-prefixed TZID): not ours to show.
        warnings.simplefilter("ignore")
        tzp.use_zoneinfo()  # an empty time zone cache: see the module's docstring
        try:
            calendar = _parse(data)
            events = list(calendar.walk("VEVENT"))
            _check(calendar, events, window, budget)
            found = _expand(calendar, window, zone, source, budget)
        finally:
            tzp.use_zoneinfo()
    return sorted(found, key=lambda b: (b.start, b.end, b.uid, b.source))


def render_event(event: CalendarEvent, stamp: datetime) -> bytes:
    """A VCALENDAR holding ``event`` alone, its times in UTC, stamped ``stamp``."""
    calendar = icalendar.Calendar()
    calendar.add("PRODID", PRODID)
    calendar.add("VERSION", "2.0")
    vevent = icalendar.Event()
    vevent.add("UID", event.uid)
    vevent.add("DTSTAMP", stamp.astimezone(UTC))
    vevent.add("DTSTART", event.start.astimezone(UTC))
    vevent.add("DTEND", event.end.astimezone(UTC))
    vevent.add("SUMMARY", event.summary)
    vevent.add("DESCRIPTION", event.description)
    vevent.add("STATUS", event.status)
    vevent.add("SEQUENCE", event.sequence)
    vevent.add("TRANSP", "OPAQUE")
    calendar.add_component(vevent)
    return bytes(calendar.to_ical())


def stored_state(data: bytes, uid: str) -> tuple[str | None, int | None]:
    """The STATUS and SEQUENCE of the event ``uid`` in ``data`` (a calendar resource
    as a server stores it); (None, None) when unreadable or not there."""
    if len(data) > MAX_BYTES:
        return None, None
    with _LOCK, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tzp.use_zoneinfo()
        try:
            calendar = icalendar.Calendar.from_ical(data)
            return _state_of(calendar, uid)
        except _UNREADABLE:
            return None, None
        finally:
            tzp.use_zoneinfo()


def _state_of(calendar: Any, uid: str) -> tuple[str | None, int | None]:
    for component in calendar.walk("VEVENT"):
        if str(component.get("UID", "")) != uid or "RECURRENCE-ID" in component:
            continue
        try:
            sequence = int(component.get("SEQUENCE", 0))
        except (TypeError, ValueError):
            sequence = 0
        status = component.get("STATUS")
        return (str(status).upper() if status is not None else None), sequence
    return None, None


# -- parsing and checks ------------------------------------------------------------


def _zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise CalendarInvalid(f"unknown time zone {name!r} for all-day and floating times") from exc


def _parse(data: bytes) -> icalendar.Calendar:
    try:
        parsed = icalendar.Calendar.from_ical(data)
    except _UNREADABLE as exc:
        # Not the library's message: it quotes the data, and a file URL's data
        # may be any file of the server's.
        raise CalendarInvalid(
            f"the data does not parse as iCalendar ({type(exc).__name__})"
        ) from exc
    if not isinstance(parsed, icalendar.Calendar):
        raise CalendarInvalid("the data is not a VCALENDAR")
    return parsed


def _check(calendar: icalendar.Calendar, events: list[Any], window: Window, budget: Budget) -> None:
    """Refuse what would be read wrong (broken properties, unknown TZIDs) or too slowly."""
    for component in calendar.walk():
        if component.errors and component.name in ("VEVENT", "VTIMEZONE", "STANDARD", "DAYLIGHT"):
            name, why = component.errors[0]
            raise CalendarInvalid(
                f"{component.name} {_uid(component)!r}: property {name} does not parse: "
                f"{_short(why)}"
            )
    steps = 0
    for event in events:
        for tzid in _unresolved_tzids(event):
            raise CalendarInvalid(
                f"event {_uid(event)!r} uses TZID {tzid!r}, which is neither defined "
                "in the calendar (VTIMEZONE) nor a known time zone name"
            )
        steps += _steps(event, window)
        if steps > budget.steps:
            raise CalendarInvalid(
                "the recurrences of the calendar are too dense to expand "
                f"(at event {_uid(event)!r})"
            )
    budget.steps -= steps


def _unresolved_tzids(event: Any) -> Iterator[str]:
    """The TZIDs of ``event`` that icalendar could not resolve: it read them as floating."""
    for name in _TIMED:
        for prop in _as_list(event.get(name)):
            tzid = prop.params.get("TZID")  # a list's (EXDATE, RDATE) TZID is on the list
            if not tzid:
                continue
            for value in _as_list(getattr(prop, "dts", None)) or [prop]:
                dt = value.dt[0] if isinstance(value.dt, tuple) else value.dt  # an RDATE PERIOD
                if isinstance(dt, datetime) and dt.tzinfo is None:
                    yield str(tzid)


def _steps(event: Any, window: Window) -> int:
    """About how many steps dateutil takes to expand ``event``'s rules up to the window's end."""
    rules = _as_list(event.get("RRULE"))
    if not rules:
        return 1
    try:
        start = _utc(event.start, UTC)
    except _UNREADABLE as exc:  # icalendar.InvalidCalendar is a ValueError
        raise CalendarInvalid(f"event {_uid(event)!r} has no valid DTSTART: {_short(exc)}") from exc
    total = 0
    for rule in rules:
        freq = _first(rule.get("FREQ"))
        if freq not in _PERIOD:
            raise CalendarInvalid(f"event {_uid(event)!r} has an RRULE without a valid FREQ")
        end = window.end
        until = _first(rule.get("UNTIL"))
        if isinstance(until, date):
            end = min(end, _utc(until, UTC) + timedelta(days=1))
        span = max((end - start).total_seconds(), 0.0)
        interval = max(int(_first(rule.get("INTERVAL")) or 1), 1)
        iterations = int(span // (_PERIOD[freq] * interval)) + 1
        by_parts = [key for key in rule if str(key).startswith("BY")]
        count = _first(rule.get("COUNT"))
        if count is not None and not by_parts:
            iterations = min(iterations, max(int(count), 1))
        per_step = 1
        if freq in _DAYS_IN_PERIOD and any(part in rule for part in _DAY_PARTS):
            per_step *= _DAYS_IN_PERIOD[freq]
        for part, unit in _TIME_PARTS:
            if part in rule and _PERIOD[freq] > unit:
                per_step *= max(len(_as_list(rule.get(part))), 1)
        total += iterations * per_step
    return total


# -- expansion ----------------------------------------------------------------------


def _expand(
    calendar: icalendar.Calendar,
    window: Window,
    zone: ZoneInfo,
    source: str | None,
    budget: Budget,
) -> list[Busy]:
    found: list[Busy] = []
    try:
        query = recurring_ical_events.of(calendar)
        # Widened: the library compares floating and all-day times in its own way;
        # each instance is compared with the window exactly in _block.
        start, end = window.start - _WIDEN, window.end + _WIDEN
        # Series by series, lazily, so the instance cap holds before the instances
        # are all made (``between`` would make every one first).
        for series in query.series:
            for occurrence in series.between(start, end):
                budget.instances -= 1
                if budget.instances < 0:
                    raise CalendarInvalid(
                        f"the calendar has too many events in the window (at most "
                        f"{MAX_INSTANCES} in one read)"
                    )
                block = _block(occurrence.as_component(False), window, zone, source)
                if block is not None:
                    found.append(block)
    except _UNREADABLE as exc:
        raise CalendarInvalid(
            f"the calendar's events do not expand ({type(exc).__name__}: {_short(exc)})"
        ) from exc
    return found


def _block(instance: Any, window: Window, zone: ZoneInfo, source: str | None) -> Busy | None:
    """The busy block of one instance, or None: it does not block, or not in the window."""
    if str(instance.get("TRANSP", "OPAQUE")).upper() == "TRANSPARENT":
        return None
    if str(instance.get("STATUS", "")).upper() == "CANCELLED":
        return None
    start, end = _utc(instance.start, zone), _utc(instance.end, zone)
    if end <= start or end <= window.start or start >= window.end:
        return None
    uid = _uid(instance)
    return Busy(source=source if source is not None else uid, uid=uid, start=start, end=end)


def _utc(value: date | datetime, zone: tzinfo) -> datetime:
    """An instant in UTC: a date is its local midnight, a floating time is local."""
    if not isinstance(value, datetime):
        value = datetime.combine(value, time(0))
    if value.tzinfo is None:
        value = value.replace(tzinfo=zone)
    return value.astimezone(UTC)


def _uid(component: Any) -> str:
    return str(component.get("UID", "")) or "(no UID)"


def _as_list(value: object) -> list[Any]:
    if value is None:
        return []
    return list(value) if isinstance(value, list) else [value]


def _first(value: object) -> Any:
    items = _as_list(value)
    return items[0] if items else None


def _short(exc: object, limit: int = 200) -> str:
    text = "".join(c if c.isprintable() else " " for c in str(exc))
    return text if len(text) <= limit else text[: limit - 3] + "..."
