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
    """Ids like ``hold_0192c0ffee01`` + 32 hex digits: milliseconds, then 128 random bits.

    128 bits because some ids are capabilities: a lease token completes an
    execution, so it must not be guessable.

    Sorting ids sorts by creation time (within a millisecond, arbitrarily),
    which keeps list cursors simple.
    """

    def new_id(self, prefix: str) -> str:
        millis = time.time_ns() // 1_000_000
        return f"{prefix}_{millis:012x}{self.random_bytes(16).hex()}"

    def random_bytes(self, size: int) -> bytes:
        """``size`` bytes of the operating system's CSPRNG (a server's ids draw
        them a few kilobytes at a time: adapters/random_ids.py)."""
        return secrets.token_bytes(size)
