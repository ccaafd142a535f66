"""``Retry-After`` as every outbound client of slotward reads it (RFC 9110, 10.2.3)."""

from __future__ import annotations

import email.utils
from datetime import datetime

__all__ = ["retry_after_seconds"]

_FAR = 1e9  # more digits than this many seconds: "a long time", not an overflow


def retry_after_seconds(value: str | None, now: datetime | None) -> float | None:
    """Delta seconds, or an HTTP-date less ``now``, as seconds from now; None when
    neither (or an HTTP-date and no ``now`` to measure it from). Never negative."""
    if value is None:
        return None
    value = value.strip()
    if value.isascii() and value.isdigit():
        return float(int(value)) if len(value) <= 9 else _FAR
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None or now is None:  # "-0000": no zone said, by RFC 5322
        return None
    return max(0.0, (when - now).total_seconds())
