"""``nearest_free``: a refusal's alternatives, read only as far out as they lie.

It must answer exactly what ``find_alternatives`` answers over the whole
horizon's busy time (the answer's contents are the contract), while reading
the store in strips that widen from the claim outward, never past the horizon
and never the same strip twice.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from slotward.engine.rules.conflicts import FIRST_REACH, Span, find_alternatives, nearest_free

NOW = datetime(2030, 10, 1, 9, 0, tzinfo=UTC)
START = NOW + timedelta(hours=25)
HALF_HOUR = timedelta(minutes=30)
HORIZON = timedelta(days=14)


class Calendar:
    """Busy spans read as a store reads them: what overlaps each window asked for."""

    def __init__(self, busy: Sequence[Span]) -> None:
        self.busy = list(busy)
        self.windows: list[Span] = []

    def read(self, lo: datetime, hi: datetime) -> list[Span]:
        self.windows.append((lo, hi))
        return [b for b in self.busy if b[0] < hi and b[1] > lo]


def _day_of_half_hours(start: datetime, free: set[int]) -> list[Span]:
    return [
        (start + i * HALF_HOUR, start + (i + 1) * HALF_HOUR) for i in range(48) if i not in free
    ]


def test_free_time_next_to_the_claim_is_found_in_one_read() -> None:
    calendar = Calendar([(START, START + HALF_HOUR)])
    found = nearest_free(calendar.read, start=START, duration=HALF_HOUR, now=NOW)
    # 09:45 and 10:15 overlap the claim's 10:00, 09:15 and 10:45 the slots found.
    assert found == [(START - 2 * HALF_HOUR, START - HALF_HOUR), (START - HALF_HOUR, START),
                     (START + HALF_HOUR, START + 2 * HALF_HOUR)]  # fmt: skip
    assert calendar.windows == [(START - FIRST_REACH, START + HALF_HOUR + FIRST_REACH)]


def test_a_full_fortnight_is_read_outward_in_strips_up_to_the_horizon() -> None:
    lo, hi = START - HORIZON, START + HALF_HOUR + HORIZON
    calendar = Calendar([(lo - timedelta(days=1), hi + timedelta(days=1))])  # nothing free
    assert nearest_free(calendar.read, start=START, duration=HALF_HOUR, now=NOW) == []
    windows = sorted(calendar.windows)
    assert windows[0][0] == lo
    assert windows[-1][1] == hi
    for before, after in itertools.pairwise(windows):  # each strip once, side by side
        assert before[1] == after[0]
    assert len(calendar.windows) == 1 + 2 * 6  # 6 h doubled to 14 days: 12, 24, ... 192, 336 h


def test_a_busy_day_is_read_only_around_the_claim() -> None:
    day = START - timedelta(hours=10)
    calendar = Calendar(_day_of_half_hours(day, {3, 17, 19, 25, 40}))
    found = nearest_free(calendar.read, start=START, duration=HALF_HOUR, now=NOW)
    whole = find_alternatives(calendar.busy, start=START, duration=HALF_HOUR, now=NOW)
    assert found == whole == [(day + 17 * HALF_HOUR, day + 18 * HALF_HOUR),
                              (day + 19 * HALF_HOUR, day + 20 * HALF_HOUR),
                              (day + 25 * HALF_HOUR, day + 26 * HALF_HOUR)]  # fmt: skip
    assert len(calendar.windows) == 1


@st.composite
def cases(draw: st.DrawFn) -> tuple[list[Span], timedelta, datetime, int, timedelta, timedelta]:
    # Busy spans over three weeks either side, so that widening runs out to
    # the horizon and past it; narrow horizons and reaches too.
    spans = draw(
        st.lists(
            st.tuples(st.integers(-30_000, 30_000), st.integers(1, 6_000)), max_size=40
        )
    )  # fmt: skip
    busy = [(START + timedelta(minutes=s), START + timedelta(minutes=s + n)) for s, n in spans]
    duration = timedelta(minutes=draw(st.integers(1, 600)))
    now = START - timedelta(minutes=draw(st.integers(-600, 3 * 1440)))
    count = draw(st.integers(1, 5))
    horizon = draw(st.sampled_from([HORIZON, timedelta(hours=3), timedelta(days=1)]))
    reach = timedelta(minutes=draw(st.sampled_from([1, 15, 90, 360, 2000, 30_000])))
    return busy, duration, now, count, horizon, reach


@settings(max_examples=300, deadline=None)
@given(cases())
def test_nearest_free_answers_what_the_whole_horizon_answers(
    case: tuple[list[Span], timedelta, datetime, int, timedelta, timedelta],
) -> None:
    busy, duration, now, count, horizon, reach = case
    calendar = Calendar(busy)
    found = nearest_free(calendar.read, start=START, duration=duration, now=now, count=count,
                         horizon=horizon, reach=reach)  # fmt: skip
    whole = find_alternatives(busy, start=START, duration=duration, now=now, count=count,
                              horizon=horizon)  # fmt: skip
    assert found == whole
    lo, hi = START - horizon, START + duration + horizon
    windows = sorted(calendar.windows)
    assert all(lo <= w[0] < w[1] <= hi for w in windows)  # never past the horizon
    for before, after in itertools.pairwise(windows):
        assert before[1] <= after[0]  # never the same time twice
