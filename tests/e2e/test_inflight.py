"""Duplicates that arrive while the first create is still being written.

A gate around the real store holds the first write until the test opens it,
so "in flight" is a state the test controls, not a race it hopes to win.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

import pytest

from slotward.engine.ports import Store, UnitOfWork
from tests.e2e.conftest import Answer, Client, Server, until

T = TypeVar("T")


class GatedStore:
    """The real store; writes wait at a gate (open unless a test closes it)."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner
        self.gate = asyncio.Event()
        self.gate.set()
        self.held = 0

    async def write(self, fn: Callable[[UnitOfWork], T]) -> T:
        if not self.gate.is_set():
            self.held += 1
            await self.gate.wait()
        return await self.inner.write(fn)

    async def read(self, fn: Callable[[UnitOfWork], T]) -> T:
        return await self.inner.read(fn)

    async def close(self) -> None:
        await self.inner.close()


GATED: list[GatedStore] = []


@pytest.fixture
def store_wrapper() -> Callable[[Store], Store]:
    def wrap(store: Store) -> Store:
        gated = GatedStore(store)
        GATED.append(gated)
        return gated

    GATED.clear()
    return wrap


async def _stuck_first_create(
    server: Server, body: dict[str, Any]
) -> tuple[Client, GatedStore, asyncio.Future[Answer]]:
    """Send a create and hold its write at the gate; return it still in flight."""
    agent = await server.key()
    [gated] = GATED
    gated.gate.clear()
    first = asyncio.ensure_future(agent.create(body))
    await until(lambda: gated.held == 1)
    return agent, gated, first


@pytest.mark.parametrize("config_overrides", [{"inflight_wait_ms": 0}])
async def test_duplicates_of_a_stuck_create_get_409_then_the_answer(
    server: Server, hold_body: dict[str, Any]
) -> None:
    agent, gated, first = await _stuck_first_create(server, hold_body)
    duplicates: list[Answer] = await asyncio.gather(*(agent.create(hold_body) for _ in range(10)))
    for dup in duplicates:
        assert dup.status == 409
        assert dup.json["code"] == "request_in_progress"
        assert dup.json["retryable"] is True
        assert dup.headers["Retry-After"] == "1"
        assert dup.key is not None
    assert gated.held == 1  # the duplicates never reached the store
    gated.gate.set()
    answer = await first
    assert answer.status == 201
    assert {dup.key for dup in duplicates} == {answer.key}
    retry = await agent.create(hold_body)
    assert retry.replayed
    assert retry.body == answer.body
    assert server.sql("SELECT count(*) FROM holds") == [(1,)]


@pytest.mark.parametrize("config_overrides", [{"inflight_wait_ms": 30_000}])
async def test_a_duplicate_that_waits_long_enough_gets_the_first_answer(
    server: Server, hold_body: dict[str, Any]
) -> None:
    agent, gated, first = await _stuck_first_create(server, hold_body)
    duplicate = asyncio.ensure_future(agent.create(hold_body))
    await until(lambda: server.services.inflight.waiting > 0)
    gated.gate.set()
    one, two = await first, await duplicate
    assert (one.status, two.status) == (201, 201)
    assert not one.replayed
    assert two.replayed
    assert two.body == one.body
    assert gated.held == 1
