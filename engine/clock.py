"""Clocks and id generators: the only place the engine learns the time.

A guardrail test allows ``datetime.now``/``time.time`` nowhere else.
"""

from __future__ import annotations

import secrets
import threading
import time
from datetime import UTC, datetime, timedelta

__all__ = ["FixedClock", "SystemClock", "TimeOrderedIds"]


class SystemClock:
    """Wall-clock time, UTC."""

    def now(self) -> datetime:
        return datetime.now(UTC)

    def timestamp(self) -> float:
        """Now as POSIX seconds, as a ``LogRecord``'s ``created``: ``now().timestamp()``
        without the datetime (a log line's, once a request)."""
        return time.time()


class FixedClock:
    """A clock tests move by hand: ``advance()`` instead of ``sleep``."""

    def __init__(self, start: datetime) -> None:
        if start.tzinfo is None:
            raise ValueError("FixedClock needs an aware datetime")
        self._now = start.astimezone(UTC)
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> datetime:
        with self._lock:
            self._now += timedelta(seconds=seconds)
            return self._now

    def set(self, instant: datetime) -> None:
        with self._lock:
            self._now = instant.astimezone(UTC)


class TimeOrderedIds:
    """Ids like ``hold_0192c0ffee01`` + 32 hex digits: milliseconds, a sequence
    within the millisecond (4 hex digits), then 112 random bits.

    112 bits because some ids are capabilities: a lease token completes an
    execution, so it must not be guessable.

    Sorting ids sorts them in the order this generator made them (the lists
    that say "oldest first" sort by id): within a millisecond the sequence
    counts up, and when the wall clock steps back, ids stay on the last
    millisecond they gave until it catches up. Ids of different generators
    (server processes) made in the same millisecond sort in either order.
    """

    SEQUENCE_LIMIT = 0x10000  # ids a millisecond before one borrows the next

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last = (0, -1)  # the last id's milliseconds and sequence

    def new_id(self, prefix: str) -> str:
        millis, sequence = self._stamp(self._time_ns() // 1_000_000)
        return f"{prefix}_{millis:012x}{sequence:04x}{self.random_bytes(14).hex()}"

    def _stamp(self, millis: int) -> tuple[int, int]:
        with self._lock:
            last, sequence = self._last
            if millis > last:
                stamp = (millis, 0)
            elif sequence + 1 < self.SEQUENCE_LIMIT:
                stamp = (last, sequence + 1)
            else:
                stamp = (last + 1, 0)
            self._last = stamp
            return stamp

    def reset_lock(self) -> None:
        """A new lock, in a child made by ``fork`` (which may have copied it held)."""
        self._lock = threading.Lock()

    def _time_ns(self) -> int:
        return time.time_ns()

    def random_bytes(self, size: int) -> bytes:
        """``size`` bytes of the operating system's CSPRNG (a server's ids draw
        them a few kilobytes at a time: adapters/random_ids.py)."""
        return secrets.token_bytes(size)
