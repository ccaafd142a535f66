"""The audit feed behind GET /v1/audit/stream (api/dashboard.py), on the fakes.

The feed polls fast here (a setting); nothing is asserted about how long
anything takes: a test waits for the next item the feed yields.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from datetime import UTC, datetime
from typing import Any

import pytest

from slotward.api import service
from slotward.api.bootstrap import Services, bootstrap
from slotward.api.config import Config
from slotward.engine.clock import FixedClock
from slotward.engine.fakes import InMemoryStore, SequentialIds
from slotward.engine.model import Principal

T0 = datetime(2030, 10, 1, 9, 0, tzinfo=UTC)
ALICE = Principal("acme", "alice", "agent", 50)
READER = Principal("acme", "rev", "reviewer", 0)
STRANGER = Principal("globex", "rev", "reviewer", 0)
FAST = Config(stream_poll_seconds=0.01, stream_keepalive_seconds=0.05, key_cache_seconds=0.02)
Feed = AsyncGenerator[dict[str, Any] | None, None]


@pytest.fixture
async def svc() -> Services:
    return await bootstrap(FAST, store=InMemoryStore(), clock=FixedClock(T0), ids=SequentialIds())


async def _hold(svc: Services, hour: int) -> None:
    fields = {"attendees": ["alex@example.com"], "start": f"2030-10-02T{hour:02d}:00:00Z",
              "duration_minutes": 30}  # fmt: skip
    await service.create_hold(svc, ALICE, fields, workflow_id=f"wf-{hour}", step=None,
                              client_key=None)  # fmt: skip


async def _allowed() -> bool:
    return True


def _feed(svc: Services, who: Principal, after: int, closing: asyncio.Event, **kw: Any) -> Feed:
    return service.audit_feed(
        svc, who, after, closing=closing, gone=kw.get("gone", lambda: False),
        still_allowed=kw.get("still_allowed", _allowed),
    )  # fmt: skip


async def _next_entry(feed: Feed) -> dict[str, Any]:
    while True:
        item = await anext(feed)
        if item is not None:
            return item


async def test_entries_come_in_order_then_new_ones_as_they_are_appended(svc: Services) -> None:
    await _hold(svc, 10)
    await _hold(svc, 11)
    closing = asyncio.Event()
    feed = _feed(svc, READER, 0, closing)
    listed = (await service.list_audit(svc, READER, 0, 10))["items"]
    assert [await _next_entry(feed), await _next_entry(feed)] == listed  # as GET /v1/audit
    await _hold(svc, 12)
    assert (await _next_entry(feed))["seq"] == 3
    closing.set()
    with pytest.raises(StopAsyncIteration):
        await anext(feed)


async def test_a_feed_from_the_head_has_only_what_comes_after(svc: Services) -> None:
    await _hold(svc, 10)
    head = await service.audit_head(svc, READER)
    assert head == 1
    assert await service.audit_head(svc, STRANGER) == 0
    feed = _feed(svc, READER, head, asyncio.Event())
    await _hold(svc, 11)
    assert (await _next_entry(feed))["seq"] == 2
    await feed.aclose()


async def test_a_quiet_feed_sends_keepalives_and_never_another_tenants_entries(
    svc: Services,
) -> None:
    await _hold(svc, 10)
    feed = _feed(svc, STRANGER, 0, asyncio.Event())
    assert [await anext(feed), await anext(feed)] == [None, None]
    await feed.aclose()


async def test_a_feed_ends_when_its_client_is_gone_or_its_caller_no_longer_allowed(
    svc: Services,
) -> None:
    gone = _feed(svc, READER, 0, asyncio.Event(), gone=lambda: True)
    with pytest.raises(StopAsyncIteration):
        await anext(gone)
    checks: list[bool] = []

    async def revoked() -> bool:
        checks.append(False)
        return False

    refused = _feed(svc, READER, 0, asyncio.Event(), still_allowed=revoked)
    ended = [item async for item in refused]  # it ends: the caller's check said no
    assert (ended, checks) == ([], [False])


async def test_a_closing_server_ends_a_waiting_feed_at_once(svc: Services) -> None:
    slow = await bootstrap(
        Config(stream_poll_seconds=60), store=InMemoryStore(), clock=FixedClock(T0)
    )
    closing = asyncio.Event()
    feed = _feed(slow, READER, 0, closing)
    waiting = asyncio.ensure_future(anext(feed))
    await asyncio.sleep(0)  # the feed has read and waits for its next poll, a minute away
    closing.set()
    for _ in range(10):  # a few turns of the loop, no time: not the minute's poll
        await asyncio.sleep(0)
    assert waiting.done()
    with pytest.raises(StopAsyncIteration):
        waiting.result()
