"""The per-agent rate limit over real HTTP: 429 with Retry-After, per agent."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest

from slotward.api.ratelimit import RateLimiter
from slotward.engine.clock import FixedClock
from slotward.engine.errors import RateLimited
from slotward.engine.model import Principal
from tests.e2e.conftest import Server

BURST = 3


@pytest.fixture
def config_overrides() -> dict[str, Any]:
    return {"rate_limit": 0.01, "rate_burst": BURST}  # a token every 100 s: none come back


async def test_an_agent_past_its_burst_gets_429_and_others_do_not(server: Server) -> None:
    agent, other = await server.key(), await server.key(agent="agent-b")
    for _ in range(BURST):
        assert (await agent.get("/v1/holds")).status == 200
    limited = await agent.get("/v1/holds")
    assert limited.status == 429
    assert limited.json["code"] == "rate_limited"
    assert limited.json["retryable"] is True
    assert 1 <= int(limited.headers["Retry-After"]) <= 100
    assert (await other.get("/v1/holds")).status == 200
    before = server.table_counts()
    refused = await agent.post("/v1/holds", {"workflow_id": "wf"})
    assert refused.status == 429  # before validation: nothing read or written for it
    assert server.table_counts() == before


@pytest.mark.parametrize("config_overrides", [{}])  # the defaults: 50/s, a burst of 100
async def test_the_limit_is_on_by_default(server: Server, config_overrides: dict[str, Any]) -> None:
    agent, other = await server.key(), await server.key(agent="agent-b")
    answers = await asyncio.gather(*(agent.get("/v1/holds") for _ in range(120)))
    assert sorted(a.status for a in answers) == [200] * 100 + [429] * 20  # the burst
    server.clock.advance(1)  # 50 tokens back, at 50/s
    answers = await asyncio.gather(*(agent.get("/v1/holds") for _ in range(60)))
    assert sorted(a.status for a in answers) == [200] * 50 + [429] * 10
    assert (await other.get("/v1/holds")).status == 200


async def test_unknown_keys_are_not_counted_against_anyone(server: Server) -> None:
    agent = await server.key()
    stranger = server.anonymous()
    for _ in range(10):
        answer = await stranger.get("/v1/holds", headers={"Authorization": "Bearer sw_nope"})
        assert answer.status == 401
    assert (await agent.get("/v1/holds")).status == 200


def test_the_bucket_refills_at_the_rate() -> None:
    clock = FixedClock(datetime(2030, 1, 1, tzinfo=UTC))
    limiter = RateLimiter(2.0, 2, clock)
    who = Principal("acme", "a", "agent", 50)
    limiter.admit(who)
    limiter.admit(who)
    with pytest.raises(RateLimited) as over:
        limiter.admit(who)
    assert over.value.retry_after == 1
    clock.advance(0.5)  # one token back at 2/s
    limiter.admit(who)
    with pytest.raises(RateLimited):
        limiter.admit(who)
    clock.advance(-60)  # a clock set back refills nothing
    with pytest.raises(RateLimited):
        limiter.admit(who)
    assert RateLimiter(0, 1, clock).enabled is False
