"""Who a presented API key is, without a read on every call.

- Answers by presented key are kept for ``SLOTWARD_KEY_CACHE_SECONDS`` (an
  LRU): a call within that time costs a dictionary lookup. An answer expires
  that long after the read it rests on began, so a revoked key works at most
  that long after its revocation committed. Concurrent first calls with one
  key share one read and one check.
- A key's check is one read by its id and one HMAC (api/keyhash.py), a few
  microseconds on the event loop: a fleet of keys this process has never seen
  is served at the store's pace. An unknown id is checked against a decoy, so
  it costs and answers what a wrong secret costs and answers.
- Nothing counts failures: a wrong guess costs the guesser one read and one
  HMAC and never touches the owner, whose right secret is always accepted.
- Keys stored as scrypt (from before HMAC) are checked in at most two threads;
  the rest wait their turn, never refused (the server's connection cap bounds
  how many wait). A good check stores the key again in the HMAC form, so each
  pays the slow hash once.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections import OrderedDict

from slotward.api.keyhash import KeyHasher, split_key
from slotward.api.ratelimit import RateLimiter
from slotward.engine.errors import SlotwardError
from slotward.engine.model import Principal
from slotward.engine.ports import Store, UnitOfWork

__all__ = ["KeyCache"]

log = logging.getLogger("slotward.keys")

_ANSWERS = 10_000
_SLOW_CHECKS = 2  # scrypt threads at once: the rest of the CPU stays the API's


class KeyCache:
    def __init__(
        self, store: Store, ttl_seconds: float, limiter: RateLimiter, hasher: KeyHasher
    ) -> None:
        self._store = store
        self.hasher = hasher
        self.limiter = limiter
        self._ttl = ttl_seconds
        self._answers: OrderedDict[str, tuple[float, Principal | None]] = OrderedDict()
        self._pending: dict[str, asyncio.Future[Principal | None]] = {}
        self._slow = asyncio.Semaphore(_SLOW_CHECKS)

    async def principal(self, secret: str) -> Principal | None:
        if not secret.isascii():
            return None  # no key has such a byte (and a lone surrogate cannot be encoded)
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
            found = await self._resolve(secret)
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

    async def _resolve(self, secret: str) -> Principal | None:
        key_id = split_key(secret)
        if key_id is None:  # a key from before key ids, found by its fast hash
            candidates = self.hasher.legacy_candidates(secret)
            return await self._store.read(lambda uow: _find(uow, candidates))
        row = await self._store.read(lambda uow: _by_id(uow, key_id))
        if row is None:
            self.hasher.verify(secret, key_id, self.hasher.decoy)  # as dear as a wrong secret
            return None
        stored, principal = row
        if not self.hasher.is_slow(stored):
            return principal if self.hasher.verify(secret, key_id, stored) else None
        return await self._upgrade(secret, key_id, stored, principal)

    async def _upgrade(
        self, secret: str, key_id: str, stored: str, principal: Principal
    ) -> Principal | None:
        """Check a key stored as scrypt and, if it is right, store it as HMAC."""
        async with self._slow:
            if not await asyncio.to_thread(self.hasher.verify, secret, key_id, stored):
                return None
        fresh = self.hasher.upgraded(secret, stored)
        try:
            await self._store.write(lambda uow: _rehash(uow, key_id, stored, fresh))
        except SlotwardError as error:  # the key is right: refusing it would be our fault
            log.warning("key %s stays scrypt until its next check: %s", key_id, error.code)
        return principal

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


def _rehash(uow: UnitOfWork, key_id: str, old: str, new: str) -> bool:
    with uow:
        moved = uow.keys.rehash(key_id, old, new)  # False: revoked or upgraded meanwhile
        uow.commit()
        return moved


def _find(uow: UnitOfWork, candidates: tuple[str, ...]) -> Principal | None:
    with uow:
        for digest in candidates:
            found = uow.keys.find(digest)
            if found is not None:
                return found
        return None
