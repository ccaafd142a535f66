"""Who a presented API key is, without a read on every call.

- Answers by presented key are kept for ``SLOTWARD_KEY_CACHE_SECONDS`` (an
  LRU): a call within that time costs a dictionary lookup. An answer expires
  that long after the read it rests on began, so a revoked key works at most
  that long after its revocation committed. Time is the service clock's (tests
  step it); a clock set back expires the answers read after the instant it
  now shows rather than stretching their lifetime. Concurrent first calls with
  one key share one read and one check.
- A key's check is one read by its id and one HMAC (api/keyhash.py), a few
  microseconds on the event loop: a fleet of keys this process has never seen
  is served at the store's pace. An unknown id is checked against a decoy, so
  it costs and answers what a wrong secret costs and answers.
- Nothing counts failures: a wrong guess costs the guesser one read and one
  HMAC and never touches the owner, whose right secret is always accepted.
- Keys stored as scrypt (from before HMAC) are checked in at most two threads,
  one key id at a time each: guesses flooding one id queue behind each other
  and leave the other thread to every other id. The rest wait their turn,
  never refused (the server's connection cap bounds how many wait). A good
  check stores the key again in the HMAC form, and the checks still queued for
  that id then cost an HMAC, so each key pays the slow hash once. Until then,
  the owner of a scrypt key whose id is being flooded waits behind the
  guesses (docs/security.md).
- Refusals are remembered apart from answers, in a smaller LRU: a stream of
  distinct wrong keys cannot push the valid keys out of the cache.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import re
from collections import OrderedDict
from collections.abc import Coroutine
from datetime import datetime, timedelta
from typing import Any

from slotward.api.keyhash import KeyHasher, split_key
from slotward.api.ratelimit import RateLimiter
from slotward.engine.errors import SlotwardError, Unauthenticated
from slotward.engine.model import Principal
from slotward.engine.ports import Clock, Store, UnitOfWork

__all__ = ["KeyCache"]

log = logging.getLogger("slotward.keys")

_ANSWERS = 10_000
_REFUSALS = 1_000
_SLOW_CHECKS = 2  # scrypt threads at once: the rest of the CPU stays the API's
_UPGRADED = 10_000  # scrypt keys upgraded by this process, remembered in their new form


# A remembered answer: (when the read it rests on began, when it expires, the answer).
_Held = tuple[datetime, datetime, Principal | None]


_PRINTABLE_ASCII = re.compile(r"[!-~]+")


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
        self._ttl = timedelta(seconds=ttl_seconds)
        self._clock = clock
        self._answers: OrderedDict[str, _Held] = OrderedDict()
        self._refusals: OrderedDict[str, _Held] = OrderedDict()
        self._pending: dict[str, asyncio.Future[Principal | None]] = {}
        self._slow = asyncio.Semaphore(_SLOW_CHECKS)
        # One scrypt check at a time per key id, and how many wait for it.
        self._slow_ids: dict[str, tuple[asyncio.Lock, int]] = {}
        self._upgraded: OrderedDict[tuple[str, str], str] = OrderedDict()

    async def resolve(self, secret: str) -> Principal:
        """The caller ``secret`` names, or 401 ``invalid_api_key`` (HTTP and MCP alike)."""
        # No key has a byte outside printable ASCII: refused before any lookup or
        # hashing sees it.
        principal = await self.principal(secret) if _PRINTABLE_ASCII.fullmatch(secret) else None
        if principal is None:
            raise Unauthenticated("unknown or revoked API key", code="invalid_api_key")
        return principal

    async def principal(self, secret: str) -> Principal | None:
        if not secret.isascii():
            return None  # no key has such a byte (and a lone surrogate cannot be encoded)
        digest = hashlib.sha256(secret.encode()).hexdigest()  # in memory only
        now = self._clock.now()
        for remembered in (self._answers, self._refusals):
            hit = remembered.get(digest)
            if hit is not None and hit[0] <= now < hit[1]:
                remembered.move_to_end(digest)
                return hit[2]
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
            read_at = self._clock.now()  # its lifetime counts from before the read
            found = await self._resolve(secret)
            self._remember(digest, read_at, found)
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
        lock, users = self._slow_ids.get(key_id, (asyncio.Lock(), 0))
        self._slow_ids[key_id] = (lock, users + 1)
        try:
            async with lock:
                fresh = self._upgraded.get((key_id, stored))
                if fresh is not None:  # verified while this check waited: an HMAC now
                    if not self.hasher.verify(secret, key_id, fresh):
                        return None
                else:
                    async with self._slow:
                        check = asyncio.to_thread(self.hasher.verify, secret, key_id, stored)
                        if not await _finish(check):
                            return None
                    fresh = self.hasher.upgraded(secret, stored)
                    self._upgraded[(key_id, stored)] = fresh
                    if len(self._upgraded) > _UPGRADED:
                        self._upgraded.popitem(last=False)
        finally:
            held, users = self._slow_ids[key_id]
            if users == 1:
                del self._slow_ids[key_id]  # nobody else waits: no lock per guessed id kept
            else:
                self._slow_ids[key_id] = (held, users - 1)
        try:
            await self._store.write(lambda uow: _rehash(uow, key_id, stored, fresh))
        except SlotwardError as error:  # the key is right: refusing it would be our fault
            log.warning("key %s stays scrypt until its next check: %s", key_id, error.code)
        return principal

    def _remember(self, digest: str, read_at: datetime, found: Principal | None) -> None:
        remembered, size = (self._answers, _ANSWERS) if found else (self._refusals, _REFUSALS)
        held = remembered.get(digest)
        # A newer answer is already here; one read "in the future" (before the
        # clock was set back) is not newer, and keeping it would defeat the cache.
        if held is not None and read_at < held[0] <= self._clock.now():
            return
        (self._refusals if found else self._answers).pop(digest, None)  # the other is stale
        remembered[digest] = (read_at, read_at + self._ttl, found)
        remembered.move_to_end(digest)
        if len(remembered) > size:
            remembered.popitem(last=False)


async def _finish(check: Coroutine[Any, Any, bool]) -> bool:
    """``check``'s result; if the caller is cancelled, the thread still runs to its end
    before the cancellation goes on, so the per-id lock and the thread bound stay true."""
    running = asyncio.ensure_future(check)
    try:
        return await asyncio.shield(running)
    except asyncio.CancelledError:
        with contextlib.suppress(Exception):
            await running
        raise


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
