"""The key cache against a real SQLite store and real scrypt.

The hasher is the real one; a subclass only counts its checks, and can hold
them at a gate so "a check in progress" is a state the test controls.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TypeVar

import pytest

from slotward.adapters.store.sqlite import SqliteStore
from slotward.api.auth import create_key, revoke_key
from slotward.api.keycache import KeyCache
from slotward.api.keyhash import KeyHasher
from slotward.api.ratelimit import RateLimiter
from slotward.engine.clock import FixedClock, TimeOrderedIds
from slotward.engine.errors import RateLimited, Unavailable
from slotward.engine.model import Principal
from slotward.engine.ports import UnitOfWork
from tests.e2e.conftest import until

T = TypeVar("T")
EVENT_WAIT = 30.0  # a guard against a hang, never a timing assertion
WHO = Principal("acme", "bot", "agent", 50)


@dataclass(frozen=True)
class CountingHasher(KeyHasher):
    checks: list[str] = field(default_factory=list, compare=False)
    gate: threading.Event = field(default_factory=threading.Event, compare=False)

    def verify(self, secret: str, key_id: str, stored: str) -> bool:
        self.checks.append(key_id)
        assert self.gate.wait(EVENT_WAIT)
        return super().verify(secret, key_id, stored)


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    opened = SqliteStore.open(f"sqlite:///{tmp_path / 'keys.db'}", timedelta(hours=24))
    yield opened
    await opened.close()


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock(datetime(2030, 1, 1, tzinfo=UTC))


def _cache(
    store: SqliteStore, clock: FixedClock, ttl: float = 60.0
) -> tuple[KeyCache, CountingHasher]:
    hasher = CountingHasher(log_n=6)
    hasher.gate.set()
    return KeyCache(store, ttl, RateLimiter(0, 1, clock), hasher, clock), hasher


async def _key(store: SqliteStore, clock: FixedClock) -> tuple[str, str]:
    made = await store.write(
        lambda uow: create_key(uow, WHO, clock, TimeOrderedIds(), KeyHasher(log_n=6))
    )
    return made.id, made.secret


async def test_concurrent_first_calls_share_one_check(
    store: SqliteStore, clock: FixedClock
) -> None:
    cache, hasher = _cache(store, clock)
    _, secret = await _key(store, clock)
    found = await asyncio.gather(*(cache.principal(secret) for _ in range(64)))
    assert found == [WHO] * 64
    assert len(hasher.checks) == 1


async def test_a_verified_key_is_reread_but_never_rehashed_and_revocation_is_seen(
    store: SqliteStore, clock: FixedClock
) -> None:
    cache, hasher = _cache(store, clock, ttl=0.0)  # every call goes back to the store
    key_id, secret = await _key(store, clock)
    for _ in range(5):
        assert await cache.principal(secret) == WHO
    assert len(hasher.checks) == 1
    await store.write(lambda uow: revoke_key(uow, key_id, clock))
    assert await cache.principal(secret) is None
    assert len(hasher.checks) == 1


class SlowReads:
    """The real store; reads wait at a gate when it is closed."""

    def __init__(self, inner: SqliteStore) -> None:
        self.inner = inner
        self.gate = asyncio.Event()
        self.gate.set()
        self.waiting = asyncio.Event()

    async def read(self, fn: Callable[[UnitOfWork], T]) -> T:
        found = await self.inner.read(fn)  # the read happens now; its answer is late
        if not self.gate.is_set():
            self.waiting.set()
            await self.gate.wait()
        return found

    async def write(self, fn: Callable[[UnitOfWork], T]) -> T:
        return await self.inner.write(fn)

    async def close(self) -> None:
        await self.inner.close()


async def test_an_answer_expires_counted_from_the_read_it_rests_on(
    store: SqliteStore, clock: FixedClock
) -> None:
    slow = SlowReads(store)
    hasher = CountingHasher(log_n=6)
    hasher.gate.set()
    ttl = 0.2
    cache = KeyCache(slow, ttl, RateLimiter(0, 1, clock), hasher, clock)
    key_id, secret = await _key(store, clock)
    slow.gate.clear()
    first = asyncio.ensure_future(cache.principal(secret))
    await asyncio.wait_for(slow.waiting.wait(), EVENT_WAIT)
    await store.write(lambda uow: revoke_key(uow, key_id, clock))  # after the read
    await asyncio.sleep(ttl * 2)  # the answer arrives later than its lifetime
    slow.gate.set()
    assert await first == WHO  # what the read saw
    assert await cache.principal(secret) is None  # not cached past read + ttl


async def test_guessed_secrets_for_a_key_id_are_limited_and_its_owner_is_not(
    store: SqliteStore, clock: FixedClock
) -> None:
    cache, hasher = _cache(store, clock, ttl=0.0)
    key_id, secret = await _key(store, clock)
    assert await cache.principal(secret) == WHO  # the owner, checked once
    body = secret.split(".")[1]
    guesses = [f"sw_{key_id}.{n:04d}{body[4:]}" for n in range(11)]
    for guess in guesses[:9]:  # the owner's check took one of the ten
        assert await cache.principal(guess) is None
    with pytest.raises(RateLimited) as limited:
        await cache.principal(guesses[9])
    assert limited.value.retry_after == 6
    assert len(hasher.checks) == 10  # the refused guess was never hashed
    assert await cache.principal(secret) == WHO  # the owner goes on, unhashed
    clock.advance(6)  # one guess back, at ten a minute
    assert await cache.principal(guesses[10]) is None
    assert len(hasher.checks) == 11


async def test_past_64_waiting_checks_callers_get_503(
    store: SqliteStore, clock: FixedClock
) -> None:
    cache, hasher = _cache(store, clock)
    hasher.gate.clear()  # checks start and hold
    keys = [await _key(store, clock) for _ in range(7)]
    guesses = [
        f"sw_{key_id}.{n:04d}{secret.split('.')[1][4:]}"
        for key_id, secret in keys
        for n in range(10)
    ]
    calls = [asyncio.ensure_future(cache.principal(g)) for g in guesses]
    await until(lambda: sum(c.done() for c in calls) == len(calls) - 64)  # refused at once
    await asyncio.sleep(0.05)  # and no more than those
    refused = [c for c in calls if c.done()]
    assert len(refused) == len(calls) - 64
    assert all(isinstance(c.exception(), Unavailable) for c in refused)
    hasher.gate.set()
    answers = await asyncio.gather(*(c for c in calls if c not in refused))
    assert answers == [None] * 64
