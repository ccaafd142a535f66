"""Time normalization: instants, DST gaps and folds, intervals, durations."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from slotward.api.http.statuses import status_of
from slotward.engine.errors import ValidationFailed
from slotward.engine.rules.timenorm import (
    Interval,
    format_instant,
    normalize_interval,
    parse_instant,
    parse_timezone,
)

T0 = datetime(2030, 3, 31, 9, 30, tzinfo=UTC)


def _error(fn: Any, *args: Any, **kwargs: Any) -> ValidationFailed:
    with pytest.raises(ValidationFailed) as info:
        fn(*args, **kwargs)
    return info.value


# format_instant


def test_format_instant_second_precision() -> None:
    assert format_instant(T0) == "2030-03-31T09:30:00Z"


def test_format_instant_microseconds() -> None:
    assert format_instant(T0.replace(microsecond=5)) == "2030-03-31T09:30:00.000005Z"


def test_format_instant_converts_offsets_to_utc() -> None:
    dt = datetime(2030, 1, 1, 0, 15, tzinfo=timezone(timedelta(hours=2)))
    assert format_instant(dt) == "2029-12-31T22:15:00Z"


def test_format_instant_pads_small_years() -> None:
    assert format_instant(datetime(5, 1, 2, 3, 4, 5, tzinfo=UTC)) == "0005-01-02T03:04:05Z"


def test_format_instant_refuses_naive() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        format_instant(datetime(2030, 1, 1))


# parse_instant: accepted spellings


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2030-03-31T09:30:00Z", T0),
        ("2030-03-31T09:30Z", T0),
        ("2030-03-31 09:30:00Z", T0),
        ("2030-03-31T11:30:00+02:00", T0),
        ("2030-03-31T11:30:00+0200", T0),
        ("2030-03-31T11:30+02", T0),
        ("2030-03-31T04:00:00-05:30", T0),
        ("2030-03-31T09:30:00-00:00", T0),
        ("2030-03-31T09:30:00.250Z", T0.replace(microsecond=250000)),
        ("2030-03-31T09:30:00.123456789Z", T0.replace(microsecond=123456)),
    ],
)
def test_parse_instant_with_offset(text: str, expected: datetime) -> None:
    assert parse_instant(text, timezone=None, field="start") == expected


def test_parse_instant_returns_stdlib_utc() -> None:
    parsed = parse_instant("2030-03-31T11:30:00+02:00", timezone=None, field="start")
    assert type(parsed) is datetime
    assert parsed.tzinfo is UTC


def test_parse_instant_offset_wins_over_timezone() -> None:
    parsed = parse_instant("2030-03-31T09:30:00Z", timezone="Asia/Tokyo", field="start")
    assert parsed == T0


@pytest.mark.parametrize(
    ("text", "zone", "expected"),
    [
        ("2030-03-31T11:30:00", "Europe/Berlin", T0),  # summer time, +02:00
        ("2030-01-15T10:00", "Europe/Berlin", datetime(2030, 1, 15, 9, tzinfo=UTC)),
        ("2030-03-31T15:00", "Asia/Kolkata", T0),
        ("2030-03-31T09:30", "UTC", T0),
        ("2030-03-31T05:30", "America/New_York", T0),
    ],
)
def test_parse_instant_local_time(text: str, zone: str, expected: datetime) -> None:
    parsed = parse_instant(text, timezone=zone, field="start")
    assert parsed == expected
    assert parsed.tzinfo is UTC


def test_parse_instant_either_side_of_a_fold() -> None:
    before = parse_instant("2030-10-27T01:59:59", timezone="Europe/Berlin", field="start")
    after = parse_instant("2030-10-27T03:00", timezone="Europe/Berlin", field="start")
    assert before == datetime(2030, 10, 26, 23, 59, 59, tzinfo=UTC)
    assert after == datetime(2030, 10, 27, 2, tzinfo=UTC)


# parse_instant: errors


@pytest.mark.parametrize(
    "value",
    [
        None,
        17,
        1.5,
        b"2030-03-31T09:30:00Z",
        "",
        "tomorrow",
        "2030-03-31",  # a bare date is not an instant
        "2030-W13-1",
        "2030-W13-1T10:00Z",  # week date
        "2030-090T10:00Z",  # ordinal date
        "20300331T093000Z",  # basic form
        "2030-03-31T09",
        "2030-02-30T10:00Z",
        "2030-03-31T24:00:00Z",
        "2030-03-31T23:59:60Z",
        "2030-03-31T10:00+25:00",
        "2030-03-31t10:00z",
        " 2030-03-31T09:30:00Z",
        "2030-03-31T09:30:00Z ",
        "２０３０-03-31T09:30:00Z",
        "0001-01-01T00:30+05:30",  # before year 1 in UTC
        "9999-12-31T23:30-05:00",  # after year 9999 in UTC
    ],
)
def test_parse_instant_invalid(value: object) -> None:
    err = _error(parse_instant, value, timezone="Europe/Berlin", field="start")
    assert err.code == "invalid_datetime"
    assert err.extra == {"field": "start"}
    assert status_of(err) == 422


def test_parse_instant_invalid_detail_is_bounded() -> None:
    err = _error(parse_instant, "x" * 10_000, timezone=None, field="end")
    assert err.code == "invalid_datetime"
    assert len(err.detail) < 200


def test_parse_instant_naive_without_timezone() -> None:
    err = _error(parse_instant, "2030-03-31T09:30:00", timezone=None, field="end")
    assert err.code == "naive_datetime"
    assert err.extra == {"field": "end"}


@pytest.mark.parametrize(
    "zone",
    [
        "Mars/Olympus",
        "europe/berlin",
        "Europe/Berlin ",
        "Europe",
        "Europe/",
        "",
        "../../etc/passwd",
        "/etc/localtime",
        "a\x00b",
        "localtime",
        "posixrules",
        "right/UTC",
        "posix/Europe/Berlin",
    ],
)
def test_parse_instant_unknown_timezone(zone: str) -> None:
    err = _error(parse_instant, "2030-03-31T09:30:00", timezone=zone, field="start")
    assert err.code == "unknown_timezone"
    assert err.extra == {"field": "timezone"}


@pytest.mark.parametrize(
    ("text", "zone"),
    [
        ("2030-03-31T02:30", "Europe/Berlin"),
        ("2030-03-31T02:00:00", "Europe/Berlin"),
        ("2030-03-31T02:59:59.999999", "Europe/Berlin"),
        ("2030-03-10T02:30", "America/New_York"),
        ("2030-10-06T02:15", "Australia/Lord_Howe"),  # a 30-minute gap
    ],
)
def test_parse_instant_dst_gap(text: str, zone: str) -> None:
    err = _error(parse_instant, text, timezone=zone, field="start")
    assert err.code == "nonexistent_local_time"
    assert err.extra == {"field": "start"}


@pytest.mark.parametrize(
    ("text", "zone"),
    [
        ("2030-10-27T02:30", "Europe/Berlin"),
        ("2030-10-27T02:00:00", "Europe/Berlin"),
        ("2030-10-27T02:59:59", "Europe/Berlin"),
        ("2030-11-03T01:30", "America/New_York"),
        ("2030-04-07T01:45", "Australia/Lord_Howe"),  # a 30-minute fold
    ],
)
def test_parse_instant_dst_fold(text: str, zone: str) -> None:
    err = _error(parse_instant, text, timezone=zone, field="end")
    assert err.code == "ambiguous_local_time"
    assert err.extra == {"field": "end"}


def test_dst_gap_and_fold_are_fine_with_an_offset() -> None:
    gap = parse_instant("2030-03-31T02:30+01:00", timezone="Europe/Berlin", field="start")
    fold = parse_instant("2030-10-27T02:30+01:00", timezone="Europe/Berlin", field="start")
    assert gap == datetime(2030, 3, 31, 1, 30, tzinfo=UTC)
    assert fold == datetime(2030, 10, 27, 1, 30, tzinfo=UTC)


def test_parse_timezone() -> None:
    assert parse_timezone("Europe/Berlin").key == "Europe/Berlin"
    err = _error(parse_timezone, "Nowhere/Town", field="tz")
    assert (err.code, err.extra) == ("unknown_timezone", {"field": "tz"})


# Interval


def test_interval_helpers() -> None:
    interval = Interval(T0, T0 + timedelta(minutes=90))
    assert interval.duration == timedelta(minutes=90)


def test_interval_is_frozen() -> None:
    interval = Interval(T0, T0 + timedelta(hours=1))
    with pytest.raises(AttributeError):
        interval.start = T0  # type: ignore[misc]


def test_interval_refuses_naive_or_empty() -> None:
    with pytest.raises(ValueError, match="aware"):
        Interval(datetime(2030, 1, 1), datetime(2030, 1, 2))
    with pytest.raises(ValueError, match="after"):
        Interval(T0, T0)


# normalize_interval


END = datetime(2030, 3, 31, 10, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"end": "2030-03-31T10:00:00Z"},
        {"end": "2030-03-31T12:00:00+02:00"},
        {"end": "2030-03-31T12:00", "timezone": "Europe/Berlin"},
        {"duration_minutes": 30},
        {"duration": "PT30M"},
        {"duration": "PT1800S"},
        {"duration": "PT0H30M0S"},
    ],
)
def test_normalize_interval_equivalent_ends(kwargs: dict[str, Any]) -> None:
    interval = normalize_interval(start="2030-03-31T09:30:00Z", **kwargs)
    assert interval == Interval(T0, END)


def test_normalize_interval_local_start_and_end() -> None:
    interval = normalize_interval(
        start="2030-03-31T11:30", end="2030-03-31T12:00", timezone="Europe/Berlin"
    )
    assert (interval.start, interval.end) == (T0, END)
    assert interval.start.tzinfo is UTC
    assert interval.end.tzinfo is UTC


def test_normalize_interval_long_duration() -> None:
    interval = normalize_interval(start="2030-03-31T09:30:00Z", duration="PT1H30M")
    assert interval.end == T0 + timedelta(minutes=90)
    assert normalize_interval(start="2030-03-31T09:30:00Z", duration="PT48H").duration == timedelta(
        hours=48
    )


def test_normalize_interval_duration_counts_exact_time_across_dst() -> None:
    # 01:30 CET + 2 h is 04:30 CEST: exact hours, not wall-clock hours.
    interval = normalize_interval(
        start="2030-03-31T01:30", duration="PT2H", timezone="Europe/Berlin"
    )
    assert interval.end == datetime(2030, 3, 31, 2, 30, tzinfo=UTC)


def test_normalize_interval_end_required() -> None:
    err = _error(normalize_interval, start="2030-03-31T09:30:00Z")
    assert (err.code, err.extra) == ("end_required", {"field": "end"})


def test_normalize_interval_none_means_absent() -> None:
    err = _error(
        normalize_interval, start="2030-03-31T09:30:00Z", end=None, duration=None, timezone=None
    )
    assert err.code == "end_required"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"end": "2030-03-31T10:00:00Z", "duration_minutes": 30},
        {"end": "2030-03-31T10:00:00Z", "duration": "PT30M"},
        {"duration_minutes": 30, "duration": "PT30M"},
        {"end": "2030-03-31T10:00:00Z", "duration_minutes": 30, "duration": "PT30M"},
    ],
)
def test_normalize_interval_end_conflict(kwargs: dict[str, Any]) -> None:
    err = _error(normalize_interval, start="2030-03-31T09:30:00Z", **kwargs)
    assert (err.code, err.extra) == ("end_conflict", {"field": "end"})


@pytest.mark.parametrize("minutes", [0, -5, True, False, 30.0, 1.5, "30", [30], {"m": 30}, 10**12])
def test_normalize_interval_invalid_duration_minutes(minutes: object) -> None:
    err = _error(normalize_interval, start="2030-03-31T09:30:00Z", duration_minutes=minutes)
    assert (err.code, err.extra) == ("invalid_duration", {"field": "duration_minutes"})


@pytest.mark.parametrize(
    "duration",
    [
        "",
        "PT",
        "P",
        "PT0M",
        "PT0H0M0S",
        "P1D",
        "P1W",
        "P1M",
        "P1Y",
        "P1DT2H",
        "PT1.5H",
        "PT0,5H",
        "PT-30M",
        "PT30m",
        "pt30m",
        "30",
        "PT30M ",
        "PT１H",
        "PT9999999999H",
        "PT999999999H",  # overflows the calendar, not the pattern
        "PT30M30H",
        30,
        b"PT30M",
    ],
)
def test_normalize_interval_invalid_duration(duration: object) -> None:
    err = _error(normalize_interval, start="2030-03-31T09:30:00Z", duration=duration)
    assert (err.code, err.extra) == ("invalid_duration", {"field": "duration"})


def test_normalize_interval_refuses_instants_past_the_supported_range() -> None:
    err = _error(normalize_interval, start="9999-12-31T23:00:00Z", duration_minutes=120)
    assert (err.code, err.extra) == ("invalid_datetime", {"field": "start"})
    err = _error(normalize_interval, start="8999-12-31T23:00:00Z", duration_minutes=120)
    assert (err.code, err.extra) == ("invalid_interval", {"field": "end"})
    err = _error(normalize_interval, start="1969-12-31T23:00:00Z", duration_minutes=120)
    assert (err.code, err.extra) == ("invalid_datetime", {"field": "start"})


@pytest.mark.parametrize("offset", ["+24:00", "+00:60", "-25:00", "+99"])
def test_out_of_range_offsets_are_invalid(offset: str) -> None:
    err = _error(parse_instant, f"2030-10-14T10:00{offset}", timezone=None, field="start")
    assert err.code == "invalid_datetime"


@pytest.mark.parametrize(
    "end",
    ["2030-03-31T09:30:00Z", "2030-03-31T09:29:59Z", "2030-03-31T11:30:00+02:00"],
)
def test_normalize_interval_end_not_after_start(end: str) -> None:
    err = _error(normalize_interval, start="2030-03-31T09:30:00Z", end=end)
    assert (err.code, err.extra) == ("invalid_interval", {"field": "end"})


@pytest.mark.parametrize("zone", [5, ["Europe/Berlin"], {"tz": "UTC"}, True])
def test_normalize_interval_timezone_not_a_string(zone: object) -> None:
    err = _error(normalize_interval, start="2030-03-31T09:30", duration="PT1H", timezone=zone)
    assert (err.code, err.extra) == ("unknown_timezone", {"field": "timezone"})


def test_normalize_interval_errors_name_their_field() -> None:
    start_err = _error(normalize_interval, start="nope", duration="PT1H")
    end_err = _error(normalize_interval, start="2030-03-31T09:30:00Z", end="2030-03-31T10:00")
    gap_err = _error(
        normalize_interval,
        start="2030-03-31T01:30",
        end="2030-03-31T02:30",
        timezone="Europe/Berlin",
    )
    assert (start_err.code, start_err.extra) == ("invalid_datetime", {"field": "start"})
    assert (end_err.code, end_err.extra) == ("naive_datetime", {"field": "end"})
    assert (gap_err.code, gap_err.extra) == ("nonexistent_local_time", {"field": "end"})
