"""Instants in the store: integer microseconds since the epoch, UTC."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

__all__ = ["from_us", "opt_from_us", "opt_to_us", "to_us"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# Made once: a timedelta built per call was two thirds of to_us, which runs
# some twenty times a create.
_MICROSECOND = timedelta(microseconds=1)


def to_us(instant: datetime) -> int:
    return (instant - _EPOCH) // _MICROSECOND


# Instants read back, by their microseconds: a refusal's search for free time
# reads the spans of every hold near the claim, and a busy calendar's holds
# start and end on the same few grid instants, conflict after conflict (their
# conversion was a sixth of a refusal's writer time). A datetime is immutable,
# so one may be handed to every reader; the memo starts over when full.
_READ: dict[int, datetime] = {}
_READ_MAX = 16_384


def from_us(micros: int) -> datetime:
    found = _READ.get(micros)
    if found is None:
        if len(_READ) >= _READ_MAX:
            _READ.clear()
        found = _READ[micros] = _EPOCH + timedelta(microseconds=micros)
    return found


def opt_from_us(micros: int | None) -> datetime | None:
    return None if micros is None else from_us(micros)


def opt_to_us(instant: datetime | None) -> int | None:
    return None if instant is None else to_us(instant)
