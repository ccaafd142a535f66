"""API keys: created once and shown once, stored hashed (HMAC-SHA256 under a
pepper when one is configured, else SHA-256), bound to a tenant, an agent, a
role and a default priority; revocable by their id.

Keys are 32 random bytes, so a fast hash is enough to make the stored value
useless to a thief; a key id prefix lets an operator name a key without it.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Collection
from dataclasses import dataclass

from aiohttp import web

from slotward.api.params import check_query
from slotward.api.ratelimit import RateLimiter
from slotward.engine.errors import Forbidden, InvalidRequest, NotFound, Unauthenticated
from slotward.engine.model import Principal, Role
from slotward.engine.ports import Clock, IdGenerator, Store, UnitOfWork

__all__ = [
    "PRINCIPAL",
    "ROLES",
    "KeyCache",
    "KeyHasher",
    "NewKey",
    "authenticate",
    "create_key",
    "hash_key",
    "require_role",
    "revoke_key",
]

ROLES: tuple[Role, ...] = ("agent", "reviewer", "admin")

# The caller once its key is resolved, for the access log (never the key itself).
PRINCIPAL = web.RequestKey("slotward.principal", Principal)


def hash_key(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


@dataclass(frozen=True)
class KeyHasher:
    """How keys are stored: HMAC-SHA256 under a server-side pepper, if one is set.

    With a pepper (``SLOTWARD_KEY_PEPPER``) a copy of the database alone does
    not even let a thief test a guessed key. Keys stored before a pepper was
    set (plain SHA-256) keep working; changing the pepper retires every key
    made under the old one.
    """

    pepper: bytes | None = None

    def stored(self, secret: str) -> str:
        if self.pepper is None:
            return hash_key(secret)
        return hmac.new(self.pepper, secret.encode(), hashlib.sha256).hexdigest()

    def candidates(self, secret: str) -> tuple[str, ...]:
        """The stored forms to look for, newest first."""
        return (self.stored(secret), hash_key(secret)) if self.pepper else (hash_key(secret),)


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
    hasher: KeyHasher = KeyHasher(),  # frozen: safe to share
) -> NewKey:
    """Store a new key for ``principal``; the secret exists only in the result."""
    if principal.role not in ROLES:
        raise InvalidRequest(f"role must be one of {', '.join(ROLES)}", code="invalid_role")
    if not 0 <= principal.priority <= 100:
        raise InvalidRequest("priority must be 0-100", code="invalid_priority")
    key_id = ids.new_id("key")
    secret = f"sw_{secrets.token_urlsafe(32)}"
    with uow:
        uow.keys.add(key_id, hasher.stored(secret), principal, clock.now())
        uow.commit()
    return NewKey(key_id, secret, principal)


def revoke_key(uow: UnitOfWork, key_id: str, clock: Clock) -> None:
    """Revoke ``key_id``: servers refuse it once their key cache forgets it."""
    with uow:
        if not uow.keys.revoke(key_id, clock.now()):
            raise NotFound(f"no unrevoked key {key_id!r}", code="key_not_found")
        uow.commit()


class KeyCache:
    """Principals by key hash for a few seconds, so auth is not a read per call."""

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
        self.limiter = limiter or RateLimiter(0, 1)

    async def principal(self, secret: str) -> Principal | None:
        digest = hash_key(secret)  # the cache's own key, whatever is stored
        hit = self._entries.get(digest)
        if hit is not None and hit[0] > time.monotonic():
            return hit[1]
        candidates = self.hasher.candidates(secret)
        found = await self._store.read(lambda uow: _find(uow, candidates))
        if len(self._entries) > 10_000:
            self._entries.clear()
        self._entries[digest] = (time.monotonic() + self._ttl, found)
        return found


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
