"""API keys: created once and shown once, stored as a keyed hash
(api/keyhash.py), bound to a tenant, an agent, a role and a default priority;
revocable by their id. Checking a presented key: api/keycache.py. Part of
api/service.py, which re-exports these; no aiohttp.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

from slotward.api.keyhash import KeyHasher
from slotward.engine.errors import InvalidRequest, NotFound
from slotward.engine.model import Principal, Role
from slotward.engine.ports import Clock, IdGenerator, Store, UnitOfWork

__all__ = ["ROLES", "NewKey", "create_key", "issue_key", "revoke_key", "withdraw_key"]

ROLES: tuple[Role, ...] = ("agent", "reviewer", "admin")


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


async def issue_key(
    store: Store, principal: Principal, clock: Clock, ids: IdGenerator, hasher: KeyHasher
) -> NewKey:
    """Create a key in one write (``slotward keys create``, the demo key)."""
    return await store.write(
        partial(create_key, principal=principal, clock=clock, ids=ids, hasher=hasher)
    )


async def withdraw_key(store: Store, key_id: str, clock: Clock) -> None:
    """Revoke a key in one write (``slotward keys revoke``)."""
    await store.write(partial(revoke_key, key_id=key_id, clock=clock))
