"""When the Python client retries, and how long it waits first.

Every call the client makes may be sent again with the same body: slotward
derives a create's idempotency key from the call's intent, and a repeated
commit or release replays the first, so a retry lands once. What is retried is
what says "the same call may work in a moment": no answer (a timeout, a refused
or reset connection, an answer cut short), 429 ``rate_limited``, 503 (the store,
a calendar or the connection cap; not one whose problem says ``retryable: false``)
and 409 ``request_in_progress`` (the same call is still being written). Every
other answer is final, ``slot_conflict`` included: its ``retryable`` means the
slot may free up, which is the agent's decision (pick an alternative), not a
loop's.

The wait honours ``Retry-After`` (seconds, or an HTTP date read against the
answer's own ``Date``, so no clock is read here), capped; without one it is an
exponential backoff with jitter, so agents refused together do not return
together.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from email.utils import parsedate_to_datetime

__all__ = ["RETRY_STATUSES", "RetryEvent", "RetryPolicy", "parse_retry_after", "should_retry"]

RETRY_STATUSES = frozenset({429, 503})


def should_retry(status: int, code: str | None, retryable: bool | None = None) -> bool:
    """Whether an answer is worth the same call again.

    ``code`` and ``retryable`` are the problem document's (``None`` without
    one). A 503 the server itself calls not retryable (``audit_key_required``:
    this process lacks a setting) is final; a proxy's bare 503 is retried.
    """
    if status == 503:
        return retryable is not False
    return status in RETRY_STATUSES or (status == 409 and code == "request_in_progress")


def parse_retry_after(value: str | None, date: str | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` value; ``None`` if absent or unreadable.

    An HTTP date needs the answer's ``Date`` to be read against; without it the
    date is ignored (the backoff applies), since this client reads no clock.
    """
    if value is None or not value.strip():
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        return _from_date(text, date)
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def _from_date(when: str, date: str | None) -> float | None:
    if date is None:
        return None
    try:
        later, now = parsedate_to_datetime(when), parsedate_to_datetime(date)
        return max(0.0, (later - now).total_seconds())
    except (TypeError, ValueError):  # unreadable, or one naive and one aware
        return None


@dataclass(frozen=True)
class RetryPolicy:
    """How many retries, and the waits between them (seconds)."""

    retries: int = 5
    base: float = 0.2  # the first backoff, doubled each retry
    cap: float = 5.0  # the longest backoff
    max_retry_after: float = 30.0  # a longer Retry-After is cut to this

    def __post_init__(self) -> None:
        if self.retries < 0:
            raise ValueError("retries must be 0 or more")
        if not (0 <= self.base <= self.cap) or self.max_retry_after < 0:
            raise ValueError("need 0 <= base <= cap and max_retry_after >= 0")

    def delay(self, retry: int, retry_after: float | None, rng: random.Random) -> float:
        """The wait before retry number ``retry`` (0 for the first).

        With a ``Retry-After`` the wait is never shorter than asked (up to a
        tenth longer, so a crowd told the same second spreads out), and never
        longer than ``max_retry_after``. Without one it lies between half and
        all of ``base * 2**retry`` (capped at ``cap``).
        """
        if retry_after is not None:
            return min(self.max_retry_after, retry_after * (1 + 0.1 * rng.random()))
        ceiling = min(self.cap, self.base * 2.0 ** min(retry, 62))
        return ceiling / 2 + rng.uniform(0, ceiling / 2)


@dataclass(frozen=True)
class RetryEvent:
    """One retry about to happen, as ``on_retry`` hooks see it.

    ``status`` is 0 when there was no answer; ``reason`` is the problem's code
    or, without an answer, what went wrong (``timeout``, ``connection_error``).
    """

    method: str
    path: str
    retry: int  # 1 for the first retry
    delay: float
    status: int
    reason: str
