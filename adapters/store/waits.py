"""How long a request may wait for the store before it is answered 503.

Two different waits: in line (for SQLite's writer thread or a pooled
PostgreSQL connection), which grows with load; and for a lock another
transaction holds (SQLite's file lock, a PostgreSQL tenant lock), which should
be short unless something is stuck. A PostgreSQL statement may run as long as
the line wait, and at least 30 s (an audit verification reads in batches),
before the server cancels it. A refused wait did nothing: the call may be
retried as it was.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["DEFAULT_WAITS", "Waits"]


@dataclass(frozen=True)
class Waits:
    """The longest waits for the store (``SLOTWARD_STORE_TIMEOUT``, ``SLOTWARD_LOCK_TIMEOUT``)."""

    queue_seconds: float = 30.0
    lock_seconds: float = 5.0
    statement_seconds: float = 30.0  # a PostgreSQL statement, before the server cancels it

    @staticmethod
    def millis(seconds: float) -> int:
        """``seconds`` as whole milliseconds, at least one (0 would mean no limit)."""
        return max(1, round(seconds * 1000))


DEFAULT_WAITS = Waits()
