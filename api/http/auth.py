"""API keys: created once and shown once, stored as a keyed hash
(api/keyhash.py), bound to a tenant, an agent, a role and a default priority;
revocable by their id. Checking a presented key: api/keycache.py.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass

from aiohttp import web

from slotward.api.http.params import check_query
from slotward.api.keycache import KeyCache
from slotward.api.keyhash import KeyHasher
from slotward.engine.errors import Forbidden, InvalidRequest, NotFound, Unauthenticated
from slotward.engine.model import Principal, Role
from slotward.engine.ports import Clock, IdGenerator, UnitOfWork

__all__ = [
    "PRINCIPAL",
    "ROLES",
    "NewKey",
    "authenticate",
    "create_key",
    "require_role",
    "revoke_key",
]

_PRINTABLE_ASCII = re.compile(r"[!-~]+")

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


async def authenticate(
    request: web.Request, cache: KeyCache, roles: Collection[Role] = ROLES
) -> Principal:
    """The caller of ``request``, or 401, 429 (over its rate) or 403."""
    header = request.headers.get("Authorization", "")
    scheme, _, secret = header.partition(" ")
    secret = secret.strip()
    if scheme.lower() != "bearer" or not secret:
        raise Unauthenticated("send 'Authorization: Bearer <api key>'", code="missing_api_key")
    if not _PRINTABLE_ASCII.fullmatch(secret):
        # No key has other bytes; refused before any lookup or hashing sees them.
        raise Unauthenticated("unknown or revoked API key", code="invalid_api_key")
    principal = await cache.principal(secret)
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
