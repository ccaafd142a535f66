"""A request costing several tokens (a batch's calls) is taken in one step:
all of them or none, and a refusal's Retry-After is the wait for all of them."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from slotward.api.ratelimit import RateLimiter
from slotward.engine.clock import FixedClock
from slotward.engine.errors import RateLimited


def limiter() -> tuple[RateLimiter, FixedClock]:
    clock = FixedClock(datetime(2030, 1, 1, tzinfo=UTC))
    return RateLimiter(rate=1, burst=3, clock=clock), clock


def test_a_refused_take_of_n_takes_nothing() -> None:
    bucket, _ = limiter()
    bucket.take("a", "over", 1)
    with pytest.raises(RateLimited) as refused:
        bucket.take("a", "over", 3)
    assert refused.value.retry_after == 1  # one more token makes three
    bucket.take("a", "over", 2)  # the two left are still there


def test_retry_after_covers_all_n_tokens() -> None:
    bucket, clock = limiter()
    bucket.take("a", "over", 3)
    with pytest.raises(RateLimited) as refused:
        bucket.take("a", "over", 2)
    assert refused.value.retry_after == 2
    clock.advance(refused.value.retry_after)
    bucket.take("a", "over", 2)
