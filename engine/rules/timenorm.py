"""Time normalization: every instant in, one UTC instant out.

Accepted instants (``parse_instant``) are ISO-8601 calendar date-times in the
extended form ``YYYY-MM-DDTHH:MM[:SS[.fraction]]`` (``T`` or one space between
date and time), either

- with ``Z`` or an offset (``+HH:MM``, ``+HHMM``, ``+HH``): the ``timezone``
  argument is then ignored, or
- without an offset, as a wall time in the IANA ``timezone`` given alongside.

Bare dates, week dates (``2030-W13-1``), ordinal dates (``2030-090``) and the
basic form (``20300331T1000Z``) are refused: a date alone is not an instant,
and the rarer spellings only add ways to be misread. Fractions beyond
microseconds are truncated.

Durations (``normalize_interval``) are ISO-8601 ``PT[nH][nM][nS]`` with whole
numbers. Days, weeks, months and years are refused: whether ``P1D`` across a
DST change means 23, 24 or 25 hours depends on the calendar, so the client
must say ``PT24H`` (exact time) or send an ``end`` (wall time).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Final
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import pendulum

from slotward.engine.errors import ValidationFailed

__all__ = [
    "EARLIEST",
    "LATEST",
    "Interval",
    "format_instant",
    "normalize_interval",
    "parse_instant",
    "parse_timezone",
]

# Far enough for any calendar, and far from datetime's limits, so arithmetic on
# an instant (alternatives, free slots) can never overflow.
EARLIEST: Final = datetime(1970, 1, 1, tzinfo=UTC)
LATEST: Final = datetime(9000, 1, 1, tzinfo=UTC)
_INSTANT: Final = re.compile(
    r"(?P<Y>[0-9]{4})-(?P<M>[0-9]{2})-(?P<D>[0-9]{2})[T ](?P<h>[0-9]{2}):(?P<m>[0-9]{2})"
    r"(?::(?P<s>[0-9]{2})(?:\.(?P<f>[0-9]{1,9}))?)?"
    r"(?P<offset>Z|(?P<sign>[+-])(?P<oh>[01][0-9]|2[0-3])(?::?(?P<om>[0-5][0-9]))?)?",
    re.ASCII,
)
_DURATION: Final = re.compile(
    r"PT(?=[0-9])(?:(?P<h>[0-9]{1,9})H)?(?:(?P<m>[0-9]{1,9})M)?(?:(?P<s>[0-9]{1,9})S)?",
    re.ASCII,
)
# Keys that resolve differently from host to host, or count leap seconds.
_HOST_ZONES: Final = frozenset({"localtime", "posixrules"})
_HOST_ZONE_PREFIXES: Final = ("posix/", "right/")


@dataclass(frozen=True)
class Interval:
    """A half-open span of time ``[start, end)`` between two aware instants.

    Back-to-back intervals (one's ``end`` is the other's ``start``) do not
    overlap.
    """

    start: datetime
    end: datetime

    def __post_init__(self) -> None:
        if self.start.utcoffset() is None or self.end.utcoffset() is None:
            raise ValueError("Interval needs timezone-aware datetimes")
        if self.end <= self.start:
            raise ValueError("Interval end must be after its start")

    @property
    def duration(self) -> timedelta:
        """The length of the interval."""
        return self.end - self.start


def format_instant(dt: datetime) -> str:
    """Format an aware datetime as UTC ISO-8601 with ``Z``.

    Second precision when the microseconds are zero, else six fraction digits.
    Naive datetimes raise ``ValueError``: they name no instant.
    """
    # isoformat (in C): a four-digit year, and the fraction only when there
    # are microseconds; it runs for every instant a create writes or answers.
    if dt.tzinfo is UTC:  # what the store and the clock give: "+00:00" ends it
        return dt.isoformat()[:-6] + "Z"
    offset = dt.utcoffset()
    if offset is None:
        raise ValueError("format_instant needs a timezone-aware datetime")
    return (dt.replace(tzinfo=None) - offset).isoformat() + "Z"


def parse_timezone(name: str, *, field: str = "timezone") -> ZoneInfo:
    """Look up an IANA time zone by its exact name (``Europe/Berlin``).

    Raises ``ValidationFailed`` (``unknown_timezone``) for names that are not
    zones, and for host-dependent keys such as ``localtime``.
    """
    if name in _HOST_ZONES or name.startswith(_HOST_ZONE_PREFIXES):
        raise _unknown_timezone(name, field)
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError) as exc:
        # OSError: a key naming a directory of the zone database ("Europe").
        raise _unknown_timezone(name, field) from exc


def parse_instant(value: object, *, timezone: str | None, field: str) -> datetime:
    """Parse one instant into a stdlib ``datetime`` in UTC.

    ``value`` carries ``Z`` or an offset (``timezone`` is then ignored), or is
    a wall time read in the IANA ``timezone``. Wall times that fall in a DST
    gap or fold are refused rather than silently shifted. Errors are
    ``ValidationFailed`` with ``extra={"field": field}`` and the codes
    ``invalid_datetime``, ``naive_datetime``, ``unknown_timezone``,
    ``nonexistent_local_time`` and ``ambiguous_local_time``.
    """
    instant = _parse_instant(value, timezone=timezone, field=field)
    if not EARLIEST <= instant <= LATEST:
        raise ValidationFailed(
            f"{field} must lie between {EARLIEST.year} and {LATEST.year}",
            code="invalid_datetime",
            extra={"field": field},
        )
    return instant


def _parse_instant(value: object, *, timezone: str | None, field: str) -> datetime:
    if not isinstance(value, str) or (match := _INSTANT.fullmatch(value)) is None:
        raise _invalid_datetime(value, field)
    wall, offset = _wall_and_offset(match, value, field)
    if offset is not None:
        return _shift_to_utc(wall, offset, value, field)
    if timezone is None:
        raise ValidationFailed(
            f"{field} has no UTC offset; add one (Z, +02:00) or send a timezone",
            code="naive_datetime",
            extra={"field": field},
        )
    return _local_to_utc(wall, parse_timezone(timezone), value, field)


def normalize_interval(
    *,
    start: object,
    end: object = None,
    duration_minutes: object = None,
    duration: object = None,
    timezone: object = None,
) -> Interval:
    """Normalize a start and exactly one of end, duration_minutes, duration.

    ``timezone`` (an IANA name) applies to the start and the end alike when
    they have no offset. ``None`` means absent for every argument. Error codes:
    ``end_required``, ``end_conflict``, ``invalid_duration``,
    ``invalid_interval``, ``unknown_timezone`` and those of ``parse_instant``.
    """
    if timezone is not None and not isinstance(timezone, str):
        raise _unknown_timezone(timezone, "timezone")
    if timezone is not None:
        parse_timezone(timezone)  # a wrong name is an error even where offsets make it moot
    begin = parse_instant(start, timezone=timezone, field="start")
    given = [v is not None for v in (end, duration_minutes, duration)]
    if not any(given):
        raise ValidationFailed(
            "give one of end, duration_minutes or duration",
            code="end_required",
            extra={"field": "end"},
        )
    if sum(given) > 1:
        raise ValidationFailed(
            "give only one of end, duration_minutes or duration",
            code="end_conflict",
            extra={"field": "end"},
        )
    if end is not None:
        finish = parse_instant(end, timezone=timezone, field="end")
    elif duration_minutes is not None:
        finish = _add(begin, _minutes_delta(duration_minutes), "duration_minutes")
    else:
        finish = _add(begin, _iso_duration_delta(duration), "duration")
    if finish <= begin:
        raise ValidationFailed(
            "end must be after start", code="invalid_interval", extra={"field": "end"}
        )
    if finish > LATEST:
        raise ValidationFailed(
            f"end must lie before {LATEST.year}", code="invalid_interval", extra={"field": "end"}
        )
    return Interval(start=begin, end=finish)


def _wall_and_offset(
    match: re.Match[str], value: str, field: str
) -> tuple[datetime, timedelta | None]:
    """The wall time as written (naive) and its offset, if it has one.

    Read from the pattern's groups: the pattern already holds every digit where
    it belongs, and a datetime from them is a tenth of pendulum's parse. A
    field out of range (a 30 February, hour 24, second 60, year 0) makes
    datetime raise: pendulum then reads the value, for its verdict and its
    words, as it reads every value it is given (tests/unit/test_timenorm_fast.py
    holds the two to the same answers).
    """
    fraction = match["f"]
    try:
        # Naive on purpose: the wall time as written, before any offset or zone.
        wall = datetime(  # noqa: DTZ001
            int(match["Y"]), int(match["M"]), int(match["D"]), int(match["h"]), int(match["m"]),
            int(match["s"] or 0), int(fraction[:6].ljust(6, "0")) if fraction else 0,
        )  # fmt: skip
    except ValueError:
        return _pendulum_wall_and_offset(match, value, field)
    if match["offset"] is None:
        return wall, None
    if match["offset"] == "Z":
        return wall, timedelta(0)
    offset = timedelta(hours=int(match["oh"]), minutes=int(match["om"] or 0))
    return wall, -offset if match["sign"] == "-" else offset


def _pendulum_wall_and_offset(
    match: re.Match[str], value: str, field: str
) -> tuple[datetime, timedelta | None]:
    parsed = _pendulum_datetime(value, field)
    wall = datetime(  # noqa: DTZ001
        parsed.year,
        parsed.month,
        parsed.day,
        parsed.hour,
        parsed.minute,
        parsed.second,
        parsed.microsecond,
    )
    if match["offset"] is None:
        return wall, None
    offset = parsed.utcoffset()
    assert offset is not None  # the pattern saw an offset, pendulum kept it
    return wall, offset


def _pendulum_datetime(value: str, field: str) -> pendulum.DateTime:
    # exact=True and tz=None: without them pendulum reads a naive time as UTC.
    try:
        parsed = pendulum.parse(value, exact=True, tz=None)
    except ValueError as exc:
        raise _invalid_datetime(value, field) from exc
    if not isinstance(parsed, pendulum.DateTime):
        raise _invalid_datetime(value, field)
    return parsed


def _shift_to_utc(wall: datetime, offset: timedelta, value: str, field: str) -> datetime:
    try:
        return (wall - offset).replace(tzinfo=UTC)
    except OverflowError as exc:
        raise _invalid_datetime(value, field) from exc


def _local_to_utc(wall: datetime, zone: ZoneInfo, value: str, field: str) -> datetime:
    # zoneinfo resolves gaps and folds silently through `fold`; the two folds
    # disagree exactly there, and only a fold's wall time survives a round trip.
    early = wall.replace(tzinfo=zone, fold=0)
    late = wall.replace(tzinfo=zone, fold=1)
    try:
        instant = early.astimezone(UTC)
        back = instant.astimezone(zone).replace(tzinfo=None)
    except OverflowError as exc:
        raise _invalid_datetime(value, field) from exc
    if early.utcoffset() == late.utcoffset():
        return instant
    if back != wall:
        raise ValidationFailed(
            f"{field} {value} does not exist in {zone.key} (clocks skip it); add an offset",
            code="nonexistent_local_time",
            extra={"field": field},
        )
    raise ValidationFailed(
        f"{field} {value} happens twice in {zone.key} (clocks go back); add an offset",
        code="ambiguous_local_time",
        extra={"field": field},
    )


def _minutes_delta(value: object) -> timedelta:
    # bool is an int subclass; `true` is not a duration.
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _invalid_duration("duration_minutes must be an integer >= 1", "duration_minutes")
    return _delta(minutes=value, field="duration_minutes")


def _iso_duration_delta(value: object) -> timedelta:
    match = _DURATION.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise _invalid_duration(
            "duration must be an ISO-8601 time duration such as PT30M or PT1H30M"
            " (hours, minutes, seconds; use PT24H rather than P1D)",
            "duration",
        )
    hours, minutes, seconds = (int(match[k] or 0) for k in ("h", "m", "s"))
    delta = _delta(hours=hours, minutes=minutes, seconds=seconds, field="duration")
    if delta <= timedelta(0):
        raise _invalid_duration("duration must be longer than zero", "duration")
    return delta


def _delta(*, hours: int = 0, minutes: int = 0, seconds: int = 0, field: str) -> timedelta:
    try:
        return timedelta(hours=hours, minutes=minutes, seconds=seconds)
    except OverflowError as exc:
        raise _invalid_duration(f"{field} is too long", field) from exc


def _add(begin: datetime, delta: timedelta, field: str) -> datetime:
    try:
        return begin + delta
    except OverflowError as exc:
        raise _invalid_duration(f"{field} is too long", field) from exc


def _shown(value: object) -> str:
    # Echo the input back, but never a megabyte of it.
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _invalid_datetime(value: object, field: str) -> ValidationFailed:
    return ValidationFailed(
        f"{field} must be an ISO-8601 date-time such as 2030-03-31T09:30:00Z, got {_shown(value)}",
        code="invalid_datetime",
        extra={"field": field},
    )


def _invalid_duration(detail: str, field: str) -> ValidationFailed:
    return ValidationFailed(detail, code="invalid_duration", extra={"field": field})


def _unknown_timezone(name: object, field: str) -> ValidationFailed:
    return ValidationFailed(
        f"{field} must be an IANA time zone name such as Europe/Berlin, got {_shown(name)}",
        code="unknown_timezone",
        extra={"field": field},
    )
