"""Who a presented API key is, without a slow hash or a read on every call.

Three layers, each bounded:

- answers by presented key for ``SLOTWARD_KEY_CACHE_SECONDS`` (an LRU): a call
  within that time costs a dictionary lookup. An answer expires that long
  after the read it rests on began, so a revoked key works at most that long
  after its revocation committed;
- secrets already verified against a stored hash (an LRU): the result of
  scrypt never changes, so after the first check a key costs one cheap read
  per expiry (to see revocation), never a second hash;
- the slow hash itself: at most two at once, off the event loop; concurrent
  first calls with one key share one check; past 64 waiting checks, 503.
  Checks of a key id that fail are limited to ten a minute per id (429), so a
  caller who knows an id cannot pin the CPU with guessed secrets; its owner's
  secret, once verified, is unaffected.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import OrderedDict

from slotward.api.keyhash import KeyHasher, split_key
from slotward.api.ratelimit import RateLimiter
from slotward.engine.errors import Unavailable
from slotward.engine.model import Principal
from slotward.engine.ports import Clock, Store, UnitOfWork

__all__ = ["KeyCache"]

_ANSWERS = 10_000
_VERIFIED = 100_000
_HASHING = 2
_WAITING = 64


class KeyCache:
    def __init__(
        self,
        store: Store,
        ttl_seconds: float,
        limiter: RateLimiter,
        hasher: KeyHasher,
        clock: Clock,
    ) -> None:
        self._store = store
        self.hasher = hasher
        self.limiter = limiter
        self._ttl = ttl_seconds
        self._answers: OrderedDict[str, tuple[float, Principal | None]] = OrderedDict()
        self._verified: OrderedDict[tuple[str, str, str], None] = OrderedDict()
        self._pending: dict[str, asyncio.Future[Principal | None]] = {}
        self._hashing = asyncio.Semaphore(_HASHING)
        self._waiting = 0
        # Ten guesses a minute per key id; an honest key is checked once.
        self._guesses = RateLimiter(1 / 6, 10, clock)

    async def principal(self, secret: str) -> Principal | None:
        digest = hashlib.sha256(secret.encode()).hexdigest()  # in memory only
        hit = self._answers.get(digest)
        if hit is not None and hit[0] > time.monotonic():
            self._answers.move_to_end(digest)
            return hit[1]
        while (pending := self._pending.get(digest)) is not None:
            try:
                return await asyncio.shield(pending)
            except asyncio.CancelledError:
                if not pending.cancelled():
                    raise  # this caller was cancelled, not the shared check
        return await self._lead(secret, digest)

    async def _lead(self, secret: str, digest: str) -> Principal | None:
        shared: asyncio.Future[Principal | None] = asyncio.get_running_loop().create_future()
        self._pending[digest] = shared
        try:
            expires = time.monotonic() + self._ttl  # from before the read it rests on
            found = await self._resolve(secret, digest)
            self._remember(digest, expires, found)
            shared.set_result(found)
            return found
        except Exception as error:
            shared.set_exception(error)
            shared.exception()  # retrieved: a check nobody shared is not an error to log
            raise
        finally:
            if not shared.done():
                shared.cancel()
            del self._pending[digest]

    async def _resolve(self, secret: str, digest: str) -> Principal | None:
        key_id = split_key(secret)
        if key_id is None:  # a key from before scrypt, found by its fast hash
            candidates = self.hasher.legacy_candidates(secret)
            return await self._store.read(lambda uow: _find(uow, candidates))
        row = await self._store.read(lambda uow: _by_id(uow, key_id))
        if row is None:
            return None
        stored, principal = row
        known = (key_id, digest, stored)
        if known in self._verified:
            self._verified.move_to_end(known)
            return principal
        self._guesses.take(key_id, f"too many failed checks of key {key_id}")
        if not await self._verify(secret, key_id, stored):
            return None
        self._verified[known] = None
        if len(self._verified) > _VERIFIED:
            self._verified.popitem(last=False)
        return principal

    async def _verify(self, secret: str, key_id: str, stored: str) -> bool:
        if self._waiting >= _WAITING:
            raise Unavailable("too many keys being checked; retry shortly", retry_after=1)
        self._waiting += 1
        try:
            async with self._hashing:
                return await asyncio.to_thread(self.hasher.verify, secret, key_id, stored)
        finally:
            self._waiting -= 1

    def _remember(self, digest: str, expires: float, found: Principal | None) -> None:
        held = self._answers.get(digest)
        if held is not None and held[0] > expires:
            return  # a newer answer is already here
        self._answers[digest] = (expires, found)
        self._answers.move_to_end(digest)
        if len(self._answers) > _ANSWERS:
            self._answers.popitem(last=False)


def _by_id(uow: UnitOfWork, key_id: str) -> tuple[str, Principal] | None:
    with uow:
        return uow.keys.by_id(key_id)


def _find(uow: UnitOfWork, candidates: tuple[str, ...]) -> Principal | None:
    with uow:
        for digest in candidates:
            found = uow.keys.find(digest)
            if found is not None:
                return found
        return None
