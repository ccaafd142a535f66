"""API keys: created once and shown once, stored as slow salted hashes
(api/keyhash.py), bound to a tenant, an agent, a role and a default priority;
revocable by their id.

A server checks a key's slow hash once and then remembers the answer for a
few seconds (:class:`KeyCache`), so the cost is paid per new key, not per call.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Collection
from dataclasses import dataclass

from aiohttp import web

from slotward.api.keyhash import KeyHasher, split_key
from slotward.api.params import check_query
from slotward.api.ratelimit import RateLimiter
from slotward.engine.errors import Forbidden, InvalidRequest, NotFound, Unauthenticated
from slotward.engine.model import Principal, Role
from slotward.engine.ports import Clock, IdGenerator, Store, UnitOfWork

__all__ = [
    "PRINCIPAL",
    "ROLES",
    "KeyCache",
    "NewKey",
    "authenticate",
    "create_key",
    "require_role",
    "revoke_key",
]

ROLES: tuple[Role, ...] = ("agent", "reviewer", "admin")

# The caller once its key is resolved, for the access log (never the key itself).
PRINCIPAL = web.RequestKey("slotward.principal", Principal)


@dataclass(frozen=True)
class NewKey:
    id: str
    secret: str
    principal: Principal


def create_key(
    uow: UnitOfWork,
    principal: Principal,
    clock: Clock,
    ids: IdGenerator,
    hasher: KeyHasher | None = None,
) -> NewKey:
    """Store a new key for ``principal``; the secret exists only in the result."""
    if principal.role not in ROLES:
        raise InvalidRequest(f"role must be one of {', '.join(ROLES)}", code="invalid_role")
    if not 0 <= principal.priority <= 100:
        raise InvalidRequest("priority must be 0-100", code="invalid_priority")
    key_id = ids.new_id("key")
    secret, stored = (hasher or KeyHasher()).new_key(key_id)
    with uow:
        uow.keys.add(key_id, stored, principal, clock.now())
        uow.commit()
    return NewKey(key_id, secret, principal)


def revoke_key(uow: UnitOfWork, key_id: str, clock: Clock) -> None:
    """Revoke ``key_id``: servers refuse it once their key cache forgets it."""
    with uow:
        if not uow.keys.revoke(key_id, clock.now()):
            raise NotFound(f"no unrevoked key {key_id!r}", code="key_not_found")
        uow.commit()


class KeyCache:
    """Principals by presented key for a few seconds, so auth is not a slow hash
    and a read per call. At most two slow hashes run at once (off the event
    loop), so a flood of wrong keys queues behind itself, not cached callers."""

    def __init__(
        self,
        store: Store,
        ttl_seconds: float,
        limiter: RateLimiter | None = None,
        hasher: KeyHasher | None = None,
    ) -> None:
        self._store = store
        self.hasher = hasher or KeyHasher()
        self._ttl = ttl_seconds
        self._entries: dict[str, tuple[float, Principal | None]] = {}
        self._hashing = asyncio.Semaphore(2)
        self.limiter = limiter or RateLimiter(0, 1)

    async def principal(self, secret: str) -> Principal | None:
        digest = hashlib.sha256(secret.encode()).hexdigest()  # in memory only
        hit = self._entries.get(digest)
        if hit is not None and hit[0] > time.monotonic():
            return hit[1]
        found = await self._resolve(secret)
        if len(self._entries) > 10_000:
            self._entries.clear()
        self._entries[digest] = (time.monotonic() + self._ttl, found)
        return found

    async def _resolve(self, secret: str) -> Principal | None:
        key_id = split_key(secret)
        if key_id is None:  # a key from before scrypt, found by its fast hash
            candidates = self.hasher.legacy_candidates(secret)
            return await self._store.read(lambda uow: _find(uow, candidates))
        row = await self._store.read(lambda uow: _by_id(uow, key_id))
        if row is None:
            return None
        stored, principal = row
        async with self._hashing:
            valid = await asyncio.to_thread(self.hasher.verify, secret, key_id, stored)
        return principal if valid else None


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


async def authenticate(
    request: web.Request, cache: KeyCache, roles: Collection[Role] = ROLES
) -> Principal:
    """The caller of ``request``, or 401, 429 (over its rate) or 403."""
    header = request.headers.get("Authorization", "")
    scheme, _, secret = header.partition(" ")
    if scheme.lower() != "bearer" or not secret.strip():
        raise Unauthenticated("send 'Authorization: Bearer <api key>'", code="missing_api_key")
    principal = await cache.principal(secret.strip())
    if principal is None:
        raise Unauthenticated("unknown or revoked API key", code="invalid_api_key")
    request[PRINCIPAL] = principal
    cache.limiter.admit(principal)  # 429 past the agent's rate
    require_role(principal, roles)
    check_query(request)  # 422 for a query parameter the route does not take
    return principal


def require_role(principal: Principal, roles: Collection[Role]) -> None:
    if principal.role not in roles:
        raise Forbidden(
            f"the {principal.role} role may not do this (needs {' or '.join(roles)})",
            code="role_forbidden",
        )
