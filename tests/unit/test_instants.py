"""Instants in the store: integer microseconds, UTC, and back (adapters/store/instants.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from slotward.adapters.store import instants
from slotward.adapters.store.instants import from_us, to_us

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@given(st.integers(min_value=-(10**15), max_value=253_402_300_799_999_999))
def test_an_instant_read_back_is_the_instant_written(micros: int) -> None:
    instant = EPOCH + timedelta(microseconds=micros)
    assert to_us(instant) == micros
    assert from_us(micros) == instant
    assert from_us(micros).tzinfo is UTC
    assert from_us(micros) == from_us(micros)  # again, from the memo


def test_the_memo_of_instants_read_stays_bounded_and_right() -> None:
    start = 1_900_000_000_000_000
    for i in range(3 * instants._READ_MAX):
        micros = start + i * 1_800_000_000  # half-hours
        assert from_us(micros) == EPOCH + timedelta(microseconds=micros)
        assert len(instants._READ) <= instants._READ_MAX
