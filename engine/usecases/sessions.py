"""Use cases of dashboard sessions: open one, find who it stands for, close it, purge.

A session is stored by the SHA-256 of its cookie's token (the token itself is
never stored) and stands for one API key, read again by id on every use, so a
revoked key ends its sessions at once. The token, its hash and the key's
checks are the service's (api/sessions.py); these only keep the rows.
"""

from __future__ import annotations

from datetime import timedelta

from slotward.engine.approvals import Session
from slotward.engine.model import Principal
from slotward.engine.ports import Clock, UnitOfWork

__all__ = ["close_session", "open_session", "purge_sessions", "session_principal"]


def open_session(
    uow: UnitOfWork,
    token_hash: str,
    key_id: str,
    tenant: str,
    clock: Clock,
    lifetime: timedelta,
) -> Session:
    """Store a new session for the key ``key_id`` of ``tenant``, ending ``lifetime`` from now."""
    with uow:
        uow.lock_tenant(tenant)
        now = clock.now()
        session = Session(
            token_hash=token_hash,
            key_id=key_id,
            tenant=tenant,
            created_at=now,
            expires_at=now + lifetime,
        )
        uow.sessions.add(session)
        uow.commit()
        return session


def session_principal(
    uow: UnitOfWork, token_hash: str, clock: Clock
) -> tuple[Session, Principal] | None:
    """The live session of ``token_hash`` and the principal of its key, in one read.

    None when there is no such session, it has expired, or its key is revoked
    (or no longer of the session's tenant: a key never moves, but a row that
    says otherwise is not trusted).
    """
    with uow:
        session = uow.sessions.get(token_hash)
        if session is None or session.expires_at <= clock.now():
            return None
        found = uow.keys.by_id(session.key_id)
    if found is None or found[1].tenant != session.tenant:
        return None
    return session, found[1]


def close_session(uow: UnitOfWork, token_hash: str) -> bool:
    """Delete the session of ``token_hash``; False when there was none."""
    with uow:
        session = uow.sessions.get(token_hash)
        if session is None:
            return False
        uow.lock_tenant(session.tenant)
        removed = uow.sessions.remove(token_hash)
        uow.commit()
        return removed


def purge_sessions(uow: UnitOfWork, clock: Clock, limit: int = 500) -> int:
    """Delete up to ``limit`` sessions expired now, over every tenant; return how many.

    No tenant lock: an expired session is refused by every read already, and
    no write of a tenant reads its sessions, so deleting one changes no
    decision; the sweeper calls this until it returns 0.
    """
    with uow:
        purged = uow.sessions.purge(clock.now(), limit)
        uow.commit()
        return purged
