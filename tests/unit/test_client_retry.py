"""The client's retry rules: what is retried, Retry-After, the backoff."""

from __future__ import annotations

import random

import pytest

from slotward.api.client.retry import RetryPolicy, parse_retry_after, should_retry

DATE = "Wed, 02 Dec 2026 00:09:17 GMT"


@pytest.mark.parametrize(
    ("value", "date", "seconds"),
    [
        ("1", None, 1.0),
        (" 120 ", None, 120.0),
        ("0", None, 0.0),
        ("1.5", None, 1.5),  # not RFC 9110's, but no reason to refuse it
        ("Wed, 02 Dec 2026 00:09:47 GMT", DATE, 30.0),  # an HTTP date, read against Date
        ("Wed, 02 Dec 2026 00:09:07 GMT", DATE, 0.0),  # already past: go now
    ],
)
def test_retry_after_is_read_as_seconds_or_a_date(
    value: str, date: str | None, seconds: float
) -> None:
    assert parse_retry_after(value, date) == seconds


@pytest.mark.parametrize(
    ("value", "date"),
    [
        (None, None),
        ("", None),
        ("soon", DATE),
        ("-1", None),
        ("nan", None),
        ("inf", None),
        ("Wed, 02 Dec 2026 00:09:47 GMT", None),  # a date and no Date to read it against
        ("Wed, 02 Dec 2026 00:09:47 GMT", "yesterday"),
    ],
)
def test_an_unreadable_retry_after_is_none(value: str | None, date: str | None) -> None:
    assert parse_retry_after(value, date) is None


@pytest.mark.parametrize(
    ("status", "code", "retried"),
    [
        (429, "rate_limited", True),
        (503, "store_unavailable", True),
        (503, None, True),  # a proxy's 503 without a problem document
        (409, "request_in_progress", True),
        (409, "slot_conflict", False),  # retryable to the server, the agent's choice here
        (409, "hold_expired", False),
        (422, "invalid_field", False),
        (401, "invalid_api_key", False),
        (404, "hold_not_found", False),
        (500, "internal_error", False),
    ],
)
def test_only_answers_that_may_change_are_retried(
    status: int, code: str | None, retried: bool
) -> None:
    assert should_retry(status, code) is retried


def test_a_503_the_server_calls_final_is_not_retried() -> None:
    assert should_retry(503, "audit_key_required", False) is False
    assert should_retry(503, "store_unavailable", True) is True
    assert should_retry(429, "rate_limited", False) is True  # a rate always refills


def test_retry_after_is_honoured_never_sooner_and_capped() -> None:
    policy, rng = RetryPolicy(max_retry_after=30), random.Random(7)
    waits = [policy.delay(n, 2.0, rng) for n in range(50)]
    assert all(2.0 <= w <= 2.2 for w in waits)
    assert len(set(waits)) > 1  # jittered: agents told the same second spread out
    assert policy.delay(0, 300.0, rng) == 30.0
    assert policy.delay(0, 0.0, rng) == 0.0


def test_the_backoff_doubles_with_jitter_up_to_its_cap() -> None:
    policy, rng = RetryPolicy(base=0.2, cap=5.0), random.Random(11)
    for retry in range(70):  # far past where 2**retry would overflow a float's use
        ceiling = min(5.0, 0.2 * 2**retry)
        waits = [policy.delay(retry, None, rng) for _ in range(20)]
        assert all(ceiling / 2 <= w <= ceiling for w in waits), retry
    assert len({policy.delay(3, None, rng) for _ in range(10)}) > 1


def test_the_same_seed_waits_the_same() -> None:
    policy = RetryPolicy()
    one = [policy.delay(n, None, random.Random(3)) for n in range(6)]
    two = [policy.delay(n, None, random.Random(3)) for n in range(6)]
    assert one == two


@pytest.mark.parametrize(
    "bad", [{"retries": -1}, {"base": 6.0, "cap": 5.0}, {"base": -0.1}, {"max_retry_after": -1}]
)
def test_a_policy_that_cannot_work_is_refused(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError, match=r"must be|need"):
        RetryPolicy(**bad)  # type: ignore[arg-type]
