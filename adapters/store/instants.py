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


def from_us(micros: int) -> datetime:
    return _EPOCH + timedelta(microseconds=micros)


def opt_from_us(micros: int | None) -> datetime | None:
    return None if micros is None else from_us(micros)


def opt_to_us(instant: datetime | None) -> int | None:
    return None if instant is None else to_us(instant)
