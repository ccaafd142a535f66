"""The key cache against a real SQLite store and the real hashes.

The hasher is the real one; a subclass only counts its checks, and can hold
the slow (scrypt) ones at a gate so "a check in progress" is a state the test
controls.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TypeVar

import pytest

from slotward.adapters.store.sqlite.store import SqliteStore
from slotward.api.keycache import KeyCache
from slotward.api.keyhash import KeyHasher
from slotward.api.keys import create_key, revoke_key
from slotward.api.ratelimit import RateLimiter
from slotward.engine.clock import FixedClock, TimeOrderedIds
from slotward.engine.errors import Unavailable
from slotward.engine.model import Principal
from slotward.engine.ports import Store, UnitOfWork
from tests.e2e.conftest import until
from tests.e2e.test_keys import scrypt_form

T = TypeVar("T")
EVENT_WAIT = 30.0  # a guard against a hang, never a timing assertion
WHO = Principal("acme", "bot", "agent", 50)


@dataclass(frozen=True)
class CountingHasher(KeyHasher):
    checks: list[str] = field(default_factory=list, compare=False)
    slow: list[str] = field(default_factory=list, compare=False)  # the scrypt ones
    gate: threading.Event = field(default_factory=threading.Event, compare=False)

    def verify(self, secret: str, key_id: str, stored: str) -> bool:
        self.checks.append(key_id)
        if self.is_slow(stored):
            self.slow.append(key_id)
        if self.is_slow(stored):  # in a thread: the event loop goes on meanwhile
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


def _cache(store: Store, clock: FixedClock, ttl: float = 60.0) -> tuple[KeyCache, CountingHasher]:
    hasher = CountingHasher()
    hasher.gate.set()
    return KeyCache(store, ttl, RateLimiter(0, 1, clock), hasher, clock), hasher


async def _key(store: SqliteStore, clock: FixedClock) -> tuple[str, str]:
    made = await store.write(lambda uow: create_key(uow, WHO, clock, TimeOrderedIds()))
    return made.id, made.secret


async def _old_key(store: SqliteStore, clock: FixedClock) -> tuple[str, str]:
    """A key stored as scrypt, as slotward made them before HMAC."""
    key_id = f"key_{secrets.token_hex(8)}"
    secret = f"sw_{key_id}.{secrets.token_urlsafe(32)}"
    stored = scrypt_form(secret, key_id, log_n=6)
    await store.write(lambda uow: _add(uow, key_id, stored, clock))
    return key_id, secret


def _add(uow: UnitOfWork, key_id: str, stored: str, clock: FixedClock) -> None:
    with uow:
        uow.keys.add(key_id, stored, WHO, clock.now())
        uow.commit()


async def _stored(store: SqliteStore, key_id: str) -> str | None:
    row = await store.read(lambda uow: _by_id(uow, key_id))
    return None if row is None else row[0]


def _by_id(uow: UnitOfWork, key_id: str) -> tuple[str, Principal] | None:
    with uow:
        return uow.keys.by_id(key_id)


def _guess(secret: str, n: int) -> str:
    key_id, body = secret.split(".")
    return f"{key_id}.{n:04d}{body[4:]}"


async def test_concurrent_first_calls_share_one_check(
    store: SqliteStore, clock: FixedClock
) -> None:
    cache, hasher = _cache(store, clock)
    _, secret = await _key(store, clock)
    found = await asyncio.gather(*(cache.principal(secret) for _ in range(64)))
    assert found == [WHO] * 64
    assert len(hasher.checks) == 1


async def test_concurrent_first_calls_with_a_scrypt_key_share_one_slow_check(
    store: SqliteStore, clock: FixedClock
) -> None:
    cache, hasher = _cache(store, clock)
    key_id, secret = await _old_key(store, clock)
    found = await asyncio.gather(*(cache.principal(secret) for _ in range(64)))
    assert found == [WHO] * 64
    assert hasher.checks == [key_id]
    stored = await _stored(store, key_id)
    assert stored is not None
    assert stored.startswith("hmac$")


async def test_a_key_is_reread_on_every_expiry_and_its_revocation_is_seen(
    store: SqliteStore, clock: FixedClock
) -> None:
    cache, _ = _cache(store, clock, ttl=0.0)  # every call goes back to the store
    key_id, secret = await _key(store, clock)
    for _ in range(5):
        assert await cache.principal(secret) == WHO
    await store.write(lambda uow: revoke_key(uow, key_id, clock))
    assert await cache.principal(secret) is None


async def test_a_revoked_key_works_until_its_answer_expires_and_no_longer(
    store: SqliteStore, clock: FixedClock
) -> None:
    cache, hasher = _cache(store, clock, ttl=60.0)
    key_id, secret = await _key(store, clock)
    assert await cache.principal(secret) == WHO
    await store.write(lambda uow: revoke_key(uow, key_id, clock))
    clock.advance(59.9)
    assert await cache.principal(secret) == WHO  # the remembered answer
    assert len(hasher.checks) == 1
    clock.advance(0.1)  # its lifetime is over: read again
    assert await cache.principal(secret) is None
    assert len(hasher.checks) == 2


async def test_a_clock_set_back_expires_answers_rather_than_stretching_them(
    store: SqliteStore, clock: FixedClock
) -> None:
    cache, _ = _cache(store, clock, ttl=60.0)
    key_id, secret = await _key(store, clock)
    assert await cache.principal(secret) == WHO
    await store.write(lambda uow: revoke_key(uow, key_id, clock))
    clock.set(clock.now() - timedelta(hours=1))  # the answer would otherwise live 1 h more
    assert await cache.principal(secret) is None


async def test_after_the_clock_is_set_back_answers_are_remembered_again(
    store: SqliteStore, clock: FixedClock
) -> None:
    """The answer read before the step back starts in the future; the fresh read
    replaces it instead of being refused as older (every call would read)."""
    cache, hasher = _cache(store, clock, ttl=60.0)
    _, secret = await _key(store, clock)
    assert await cache.principal(secret) == WHO
    clock.set(clock.now() - timedelta(minutes=1))
    for _ in range(5):
        assert await cache.principal(secret) == WHO
    assert len(hasher.checks) == 2  # one read before the step, one after


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
    ttl = 60.0
    cache, _ = _cache(slow, clock, ttl)
    key_id, secret = await _key(store, clock)
    slow.gate.clear()
    first = asyncio.ensure_future(cache.principal(secret))
    await asyncio.wait_for(slow.waiting.wait(), EVENT_WAIT)
    await store.write(lambda uow: revoke_key(uow, key_id, clock))  # after the read
    clock.advance(ttl * 2)  # the answer arrives later than its lifetime
    slow.gate.set()
    assert await first == WHO  # what the read saw
    assert await cache.principal(secret) is None  # not cached past read + ttl


async def test_guesses_for_a_key_id_never_refuse_its_owner(
    store: SqliteStore, clock: FixedClock
) -> None:
    cache, hasher = _cache(store, clock, ttl=0.0)
    _, secret = await _key(store, clock)
    for n in range(50):  # before the owner's first call: nothing to remember it by
        assert await cache.principal(_guess(secret, n)) is None
    assert await cache.principal(secret) == WHO
    assert len(hasher.checks) == 51  # each guess was checked, none refused unchecked


async def test_an_unknown_key_id_costs_a_check_as_a_wrong_secret_does(
    store: SqliteStore, clock: FixedClock
) -> None:
    cache, hasher = _cache(store, clock)
    _, secret = await _key(store, clock)
    unknown = f"sw_key_{'f' * 16}.{secret.split('.')[1]}"
    assert await cache.principal(unknown) is None
    assert await cache.principal(_guess(secret, 0)) is None
    assert hasher.checks == ["key_" + "f" * 16, secret.split(".")[0].removeprefix("sw_")]


async def test_a_key_with_characters_outside_ascii_is_unknown_not_an_error(
    store: SqliteStore, clock: FixedClock
) -> None:
    cache, hasher = _cache(store, clock)
    _, secret = await _key(store, clock)
    # A header's bytes 0x80-0xff reach the handler as these (surrogate escapes).
    for presented in (secret + "\udcff", "sw_\udcff\udcfe", secret[:-1] + "é"):
        assert await cache.principal(presented) is None
    assert hasher.checks == []


async def test_scrypt_checks_past_two_wait_their_turn_and_none_is_refused(
    store: SqliteStore, clock: FixedClock
) -> None:
    cache, hasher = _cache(store, clock)
    hasher.gate.clear()  # checks start and hold
    olds = [await _old_key(store, clock) for _ in range(70)]
    calls = [asyncio.ensure_future(cache.principal(secret)) for _, secret in olds]
    await until(lambda: len(hasher.checks) == 2)
    await asyncio.sleep(0.05)  # room for a refusal or a third check, were there one
    assert len(hasher.checks) == 2
    assert not any(c.done() for c in calls)
    hasher.gate.set()
    assert await asyncio.gather(*calls) == [WHO] * 70
    stored = [await _stored(store, key_id) for key_id, _ in olds]
    assert all(s is not None and s.startswith("hmac$") for s in stored)


class RefusedWrites:
    """The real store; every write is refused as a store too busy would refuse it."""

    def __init__(self, inner: SqliteStore) -> None:
        self.inner = inner

    async def read(self, fn: Callable[[UnitOfWork], T]) -> T:
        return await self.inner.read(fn)

    async def write(self, fn: Callable[[UnitOfWork], T]) -> T:
        raise Unavailable("the store is busy", retry_after=1)

    async def close(self) -> None:
        await self.inner.close()


async def test_a_right_scrypt_key_is_accepted_when_its_rewrite_fails(
    store: SqliteStore, clock: FixedClock, caplog: pytest.LogCaptureFixture
) -> None:
    cache, hasher = _cache(RefusedWrites(store), clock, ttl=0.0)
    key_id, secret = await _old_key(store, clock)
    with caplog.at_level(logging.WARNING, logger="slotward.keys"):
        assert await cache.principal(secret) == WHO
        assert await cache.principal(secret) == WHO  # checked again: still scrypt
    assert len(hasher.checks) == 2
    stored = await _stored(store, key_id)
    assert stored is not None
    assert stored.startswith("scrypt$")
    assert [r.levelno for r in caplog.records] == [logging.WARNING] * 2
    assert all(secret.split(".")[1] not in r.getMessage() for r in caplog.records)


async def test_guesses_flooding_one_scrypt_id_leave_the_other_thread_to_other_ids(
    store: SqliteStore, clock: FixedClock
) -> None:
    cache, hasher = _cache(store, clock)
    hasher.gate.clear()  # checks start and hold
    flooded, flooded_secret = await _old_key(store, clock)
    other, other_secret = await _old_key(store, clock)
    guesses = [asyncio.ensure_future(cache.principal(_guess(flooded_secret, n))) for n in range(8)]
    await until(lambda: len(hasher.slow) == 1)
    owner = asyncio.ensure_future(cache.principal(other_secret))
    await until(lambda: len(hasher.slow) == 2)
    await asyncio.sleep(0.05)  # room for a third check, were there one
    assert hasher.slow == [flooded, other]  # one of the flood's checks, and the other id's
    hasher.gate.set()
    assert await owner == WHO
    assert await asyncio.gather(*guesses) == [None] * 8


async def test_checks_queued_behind_an_upgrade_cost_an_hmac(
    store: SqliteStore, clock: FixedClock
) -> None:
    cache, hasher = _cache(store, clock)
    hasher.gate.clear()
    key_id, secret = await _old_key(store, clock)
    first = asyncio.ensure_future(cache.principal(secret))  # the owner, then guesses behind it
    await until(lambda: len(hasher.slow) == 1)
    queued = [asyncio.ensure_future(cache.principal(_guess(secret, n))) for n in range(20)]
    hasher.gate.set()
    assert await first == WHO
    assert await asyncio.gather(*queued) == [None] * 20
    assert hasher.slow == [key_id]  # one scrypt check; the 20 guesses were HMACs


async def test_a_flood_of_wrong_keys_does_not_push_a_valid_key_out_of_the_cache(
    store: SqliteStore, clock: FixedClock
) -> None:
    cache, hasher = _cache(store, clock, ttl=3600.0)
    key_id, secret = await _key(store, clock)
    assert await cache.principal(secret) == WHO
    wrong = [f"sw_key_{n:016x}.{'x' * 43}" for n in range(10_050)]  # past the answers' LRU
    for presented in wrong:
        assert await cache.principal(presented) is None
    await store.write(lambda uow: revoke_key(uow, key_id, clock))
    checks = len(hasher.checks)
    assert await cache.principal(secret) == WHO  # still the remembered answer: not evicted
    assert len(hasher.checks) == checks


async def test_a_cancelled_scrypt_check_holds_its_place_until_its_thread_ends(
    store: SqliteStore, clock: FixedClock
) -> None:
    cache, hasher = _cache(store, clock)
    hasher.gate.clear()
    _, secret = await _old_key(store, clock)
    first = asyncio.ensure_future(cache.principal(_guess(secret, 1)))
    await until(lambda: len(hasher.slow) == 1)
    first.cancel()  # its caller went away; its thread cannot be stopped
    second = asyncio.ensure_future(cache.principal(secret))
    await asyncio.sleep(0.05)  # room for a second thread, were one started
    assert len(hasher.slow) == 1  # one check of this id at a time, still
    hasher.gate.set()
    assert await second == WHO
    with contextlib.suppress(asyncio.CancelledError):
        await first
