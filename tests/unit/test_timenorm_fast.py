"""parse_instant reads the pattern's digits itself and asks pendulum only when
datetime refuses them (engine/rules/timenorm.py): both must give one answer."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slotward.engine.errors import ValidationFailed
from slotward.engine.rules.timenorm import (
    _INSTANT,
    _pendulum_wall_and_offset,
    _wall_and_offset,
    format_instant,
)


def _answers(value: str) -> tuple[object, object]:
    match = _INSTANT.fullmatch(value)
    assert match is not None
    answers: list[object] = []
    for read in (_wall_and_offset, _pendulum_wall_and_offset):
        try:
            answers.append(read(match, value, "start"))
        except ValidationFailed as exc:
            answers.append((exc.code, exc.detail))
    return answers[0], answers[1]


@given(st.from_regex(_INSTANT, fullmatch=True))
def test_the_pattern_and_pendulum_read_every_instant_alike(value: str) -> None:
    fast, slow = _answers(value)
    assert fast == slow


@pytest.mark.parametrize(
    "value",
    [
        "2030-01-01T24:00Z",
        "2030-01-01T23:59:60Z",
        "2030-02-29T10:00Z",
        "2032-02-29T10:00Z",
        "0000-01-01T00:00Z",
        "9999-12-31T23:59:59.999999999+23:59",
        "2030-01-01 10:00+05",
        "2030-01-01T10:00-0530",
        "2030-01-01T10:00:00.123456789-00:00",
        "2030-01-01T10:00:00.1Z",
        "2030-01-01T10:00:00.000001+01",
        "2030-13-01T10:00Z",
        "2030-01-00T10:00Z",
        "2030-01-01T10:60Z",
        "2030-01-01T10:00",
    ],
)
def test_the_edges_read_alike(value: str) -> None:
    fast, slow = _answers(value)
    assert fast == slow


@given(
    moment=st.datetimes(),
    separator=st.sampled_from("T "),
    seconds=st.sampled_from(["", ":ss", ":ss.f"]),
    digits=st.integers(min_value=1, max_value=9),
    offset=st.sampled_from(["", "Z", "+00:00", "-00:00", "+05", "-0530", "+23:59", "-12:45"]),
)
def test_valid_wall_times_in_every_spelling_read_alike(
    moment: datetime, separator: str, seconds: str, digits: int, offset: str
) -> None:
    text = f"{moment:%Y-%m-%d}{separator}{moment:%H:%M}"
    if seconds:
        text += f":{moment:%S}"
    if seconds == ":ss.f":
        text += "." + f"{moment.microsecond:06d}{moment.microsecond % 997:03d}"[:digits]
    value = text + offset
    if _INSTANT.fullmatch(value) is None:  # a year below 1000 has fewer than four digits
        return
    fast, slow = _answers(value)
    assert fast == slow


@given(st.datetimes(min_value=datetime(2, 1, 1), timezones=st.just(UTC)))
def test_format_instant_of_utc_is_the_shifted_naive_isoformat(moment: datetime) -> None:
    expected = (moment.replace(tzinfo=None) - timedelta(0)).isoformat() + "Z"
    assert format_instant(moment) == expected
    same_instant = moment.astimezone(timezone(timedelta(hours=-3)))  # the general path
    assert format_instant(same_instant) == expected
