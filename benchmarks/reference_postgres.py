"""The reference server's PostgreSQL store: the create transaction on asyncpg.

One connection pool per process. Each create is one READ COMMITTED transaction
whose first statement takes the tenant's transaction-scoped advisory lock,
the same per-tenant lock slotward takes (adapters/store/repos.py
``lock_tenant``): a tenant's creates run one at a time, whichever process they
reach, and every statement after the lock sees what the previous holder
committed. That is what makes the overlap check and the audit chain correct
under concurrency. The connections get slotward's settings that change how
the transaction runs: custom plans for prepared statements (the overlap scan
stays on its index) and the same bounded lock wait.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

# asyncpg ships no type information; its values are typed where we take them.
import asyncpg  # type: ignore[import-untyped]

from slotward.benchmarks.reference_model import (
    CONFLICT,
    GENESIS,
    HOLD_TTL_US,
    MAX_HOLD_US,
    RETENTION_US,
    Claim,
    Unavailable,
    hold_document,
    next_audit,
    schema,
)

__all__ = ["PostgresReference", "asyncpg_dsn", "create_postgres_schema"]

POOL_SIZE = 10  # slotward's writer pool (5 + 5 overflow) per process
ACQUIRE_SECONDS = 30.0  # slotward's SLOTWARD_STORE_TIMEOUT default
_SETTINGS = {"plan_cache_mode": "force_custom_plan", "lock_timeout": "5000ms"}
_PREFIXES = ("postgresql+asyncpg://", "postgresql://", "postgres://")

_LOCK = "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))"
_REPLAY = "SELECT body FROM ref_idempotency WHERE tenant = $1 AND key = $2"
# Holds last at most MAX_HOLD_US, so one that overlaps [start, end) starts
# after start - MAX_HOLD_US: the bounded scan of slotward's ``_OVERLAPPING``.
_OVERLAP = """
    SELECT 1 FROM ref_hold_attendees a JOIN ref_holds h ON h.id = a.hold_id
    WHERE a.tenant = $1 AND a.attendee = ANY($2::text[]) AND a.start_us < $3
      AND a.start_us > $4 AND a.end_us > $5 AND a.active
      AND (h.status = 'committed' OR h.expires_us > $6)
    LIMIT 1"""
_HOLD = "INSERT INTO ref_holds VALUES ($1, $2, $3, $4, $5, $6, $7, 'held', $8, 1, $9)"
_ATTENDEES = """
    INSERT INTO ref_hold_attendees (hold_id, attendee, tenant, start_us, end_us, active)
    SELECT $1, a, $3, $4, $5, true FROM unnest($2::text[]) AS a"""
_RECORD = "INSERT INTO ref_idempotency VALUES ($1, $2, 201, $3, $4, $5, $6)"
_HEAD = "SELECT seq, hash FROM ref_audit WHERE tenant = $1 ORDER BY seq DESC LIMIT 1"
_AUDIT = "INSERT INTO ref_audit VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
_OUTBOX = "INSERT INTO ref_outbox VALUES ($1, $2, 'hold.created', $3, $4, 'pending', 0, $5, $5)"

# A lock wait past lock_timeout, a lost or refused connection: a retry may work.
_UNAVAILABLE = (
    asyncpg.LockNotAvailableError,
    asyncpg.PostgresConnectionError,
    asyncpg.TooManyConnectionsError,
    asyncpg.CannotConnectNowError,
    OSError,
    TimeoutError,
)


def asyncpg_dsn(url: str) -> str | None:
    """``url`` as asyncpg takes it (``postgresql://``), or None if it is not PostgreSQL."""
    for prefix in _PREFIXES:
        if url.startswith(prefix):
            return "postgresql://" + url[len(prefix) :]
    return None


async def create_postgres_schema(dsn: str) -> None:
    """Create the ``ref_`` tables if they are missing (one process at a time)."""
    conn = await asyncpg.connect(dsn)
    try:
        async with conn.transaction():
            await conn.execute(_LOCK, "slotward-reference-schema")
            for statement in schema("BYTEA"):
                await conn.execute(statement)
    finally:
        await conn.close()


async def _create(conn: Any, claim: Claim) -> tuple[int, bytes]:
    """The statements of one create, inside the caller's transaction."""
    tenant = claim.tenant
    await conn.execute(_LOCK, tenant)
    stored = await conn.fetchval(_REPLAY, tenant, claim.key)
    if stored is not None:
        return 200, bytes(stored)
    now = time.time_ns() // 1000  # read after the lock: no stale time after a wait
    start, end, attendees = claim.start_us, claim.end_us, list(claim.attendees)
    probe = (tenant, attendees, end, start - MAX_HOLD_US, start, now)
    if await conn.fetchval(_OVERLAP, *probe) is not None:
        return 409, CONFLICT
    hold_id, expires = uuid.uuid4().hex, now + HOLD_TTL_US
    body = hold_document(claim, hold_id, expires)
    await conn.execute(_HOLD, hold_id, tenant, claim.workflow_id, claim.key,
                       json.dumps(attendees), start, end, expires, now)  # fmt: skip
    await conn.execute(_ATTENDEES, hold_id, attendees, tenant, start, end)
    await conn.execute(_RECORD, tenant, claim.key, body, hold_id, now, now + RETENTION_US)
    head = await conn.fetchrow(_HEAD, tenant)
    e = next_audit((0, GENESIS) if head is None else (head[0], head[1]), claim, hold_id, now)
    await conn.execute(_AUDIT, e.tenant, e.seq, e.at_us, e.actor, e.action, e.key,
                       e.hold_id, e.outcome, e.prev_hash, e.hash)  # fmt: skip
    await conn.execute(_OUTBOX, uuid.uuid4().hex, tenant, hold_id, body.decode(), now)
    return 201, body


class PostgresReference:
    """Runs each create as one tenant-locked transaction on a pooled connection."""

    def __init__(self, pool: Any) -> None:
        self._pool = pool

    @classmethod
    async def open(cls, dsn: str) -> PostgresReference:
        pool = await asyncpg.create_pool(
            dsn, min_size=1, max_size=POOL_SIZE, server_settings=_SETTINGS
        )
        return cls(pool)

    async def create(self, claim: Claim) -> tuple[int, bytes]:
        """The answer to ``claim``: (201, new hold), (200, stored answer) or (409, conflict)."""
        try:
            async with self._pool.acquire(timeout=ACQUIRE_SECONDS) as conn, conn.transaction():
                return await _create(conn, claim)
        except _UNAVAILABLE as exc:
            raise Unavailable(str(exc)) from exc

    async def close(self) -> None:
        await asyncio.wait_for(self._pool.close(), timeout=30)
