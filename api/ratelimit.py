"""Token buckets: the per-agent request rate.

``SLOTWARD_RATE_LIMIT`` requests per second (50 by default, 0 turns it off),
with a burst of ``SLOTWARD_RATE_BURST`` (twice the rate by default): far above
what an agent thinking between calls sends, far below a runaway retry loop.
Each server process keeps its own buckets, so with ``--workers N`` an agent
may reach N times the rate. Time is the service clock's, so tests step it.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Hashable
from dataclasses import dataclass

from slotward.engine.errors import RateLimited
from slotward.engine.model import Principal
from slotward.engine.ports import Clock

__all__ = ["RateLimiter"]

_MAX_BUCKETS = 100_000  # past this, full (idle) buckets are dropped


@dataclass
class _Bucket:
    tokens: float
    at: float


class RateLimiter:
    """``admit`` raises :class:`RateLimited` (429, ``Retry-After``) past the rate."""

    def __init__(self, rate: float, burst: int, clock: Clock) -> None:
        self._rate = rate
        self._burst = float(max(1, burst))
        self._clock = clock
        self._buckets: dict[Hashable, _Bucket] = {}
        # The buckets' arithmetic is one step: the MCP server's thread and the
        # event loop may count the same agent at once.
        self._lock = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self._rate > 0

    @property
    def burst(self) -> int:
        """The most tokens a bucket holds: a request costing more never passes."""
        return int(self._burst)

    def admit(self, principal: Principal, n: int = 1) -> None:
        """Count a request of ``principal``'s agent costing ``n`` (a batch's calls)."""
        wait = self._wait((principal.tenant, principal.agent_id), n)
        if wait is not None:  # the words made only for a refusal: every call passes here
            refusal = f"agent {principal.agent_id!r} is over its rate of {self._rate:g} requests/s"
            raise _refused(refusal, wait)

    def take(self, slot: Hashable, refusal: str, n: int = 1) -> None:
        """Take ``n`` tokens from ``slot``'s bucket in one step, or none and refuse
        with ``refusal``: Retry-After is then the wait for all ``n``."""
        wait = self._wait(slot, n)
        if wait is not None:
            raise _refused(refusal, wait)

    def _wait(self, slot: Hashable, n: int) -> int | None:
        """Take ``n`` tokens from ``slot``'s bucket, or none and answer the seconds to
        wait for all ``n``; None when taken (or nothing is counted)."""
        if not self.enabled:
            return None
        with self._lock:
            now = self._clock.now().timestamp()
            bucket = self._buckets.get(slot)
            if bucket is None:
                if len(self._buckets) >= _MAX_BUCKETS:
                    self._forget_full(now)
                bucket = self._buckets[slot] = _Bucket(self._burst, now)
            elapsed = max(0.0, now - bucket.at)  # a clock set back refills nothing
            bucket.tokens = min(self._burst, bucket.tokens + elapsed * self._rate)
            bucket.at = max(bucket.at, now)
            if bucket.tokens >= n:
                bucket.tokens -= n
                return None
            return math.ceil((n - bucket.tokens) / self._rate)

    def _forget_full(self, now: float) -> None:
        full = [
            slot for slot, b in self._buckets.items()
            if b.tokens + max(0.0, now - b.at) * self._rate >= self._burst
        ]  # fmt: skip
        for slot in full:
            del self._buckets[slot]


def _refused(refusal: str, wait: int) -> RateLimited:
    """The 429 of a bucket short of tokens for ``wait`` seconds."""
    return RateLimited(f"{refusal}; retry in {wait} s", retry_after=wait)
