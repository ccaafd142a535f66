"""The scale-out store: PostgreSQL through asyncpg, for several server processes.

Every write runs the same synchronous use case as on SQLite, in a greenlet
as SQLAlchemy's ``run_sync`` does (statements await asyncpg on the event
loop; no thread hops), in a READ COMMITTED transaction whose first act is to take its
locks (adapters/store/postgres/locks.py): a create, the attendees it claims
(``UnitOfWork.lock_attendees``), under its tenant's lock shared; any other
write, its tenant's lock exclusive (``UnitOfWork.lock_tenant``). So writes
that could disagree run one at a time whichever process they come from, and
every statement after a lock sees everything committed before it: the same
reasoning as SQLite's single writer, per attendee instead of per file. The
tenant's audit chain is extended one append at a time, at its locked head.
Tenants never wait for each other. An exclusion constraint over active holds
is the second line of defence. Reads use REPEATABLE READ snapshots. A deadlock
(40P01) or serialization failure (40001), which the lock discipline should
prevent, is retried a bounded number of times, and so is a transaction that
found it needed more attendee locks than it took first (``LockOrderRetry``).
See docs/concurrency.md.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable
from datetime import timedelta
from typing import Any, NoReturn, TypeVar

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DBAPIError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.util import greenlet_spawn

from slotward.adapters.store.migrate import upgrade
from slotward.adapters.store.postgres.locks import LockOrderRetry
from slotward.adapters.store.postgres.pool import check_on_checkout
from slotward.adapters.store.repos import SqlUnitOfWork
from slotward.adapters.store.waits import DEFAULT_WAITS, Waits
from slotward.engine.errors import Unavailable
from slotward.engine.ports import UnitOfWork

__all__ = ["RETRYABLE_SQLSTATES", "PostgresStore", "server_settings"]

T = TypeVar("T")

RETRYABLE_SQLSTATES = frozenset({"40001", "40P01"})
MAX_ATTEMPTS = 30


def _sqlstate(exc: DBAPIError) -> str | None:
    orig: Any = exc.orig
    for attr in ("sqlstate", "pgcode"):
        code = getattr(orig, attr, None) or getattr(getattr(orig, "__cause__", None), attr, None)
        if code:
            return str(code)
    return None


DEFAULT_POOL_SIZE = 10


def server_settings(waits: Waits) -> dict[str, str]:
    """The settings every connection of the store starts with."""
    return {
        # asyncpg prepares every statement. Under the default plan cache mode
        # PostgreSQL soon plans each once for any values (a generic plan) and
        # keeps that plan as the table grows; custom plans are made again at
        # every call, for its values and the table's size then. Neither is
        # sure on a never analysed table (docs/concurrency.md "Plans").
        "plan_cache_mode": "force_custom_plan",
        # Every wait is bounded, so no request hangs on the store: a stuck
        # holder of a tenant lock makes its waiters give up with a 503, and a
        # runaway statement is cancelled by the server (a clean abort, unlike
        # cancelling the client's task halfway).
        "lock_timeout": f"{Waits.millis(waits.lock_seconds)}ms",
        "statement_timeout": f"{Waits.millis(waits.statement_seconds)}ms",
        "idle_in_transaction_session_timeout": "30s",
    }


def _engine(url: str, waits: Waits, pool_size: int, **options: Any) -> AsyncEngine:
    return create_async_engine(
        url,
        # Two pools (writes, reads) of at most ``pool_size`` each (10 by
        # default: 4 workers stay within PostgreSQL's default max_connections
        # of 100). All kept open: an overflow connection, closed at its return
        # and opened again at the next burst, costs a connection setup a time.
        pool_size=pool_size,
        max_overflow=0,
        pool_timeout=waits.queue_seconds,  # no connection free that long: a 503, not a hang
        hide_parameters=True,  # errors are logged: never with stored bodies or tokens in them
        connect_args={"server_settings": server_settings(waits)},
        **options,
    )


class PostgresStore:
    """Runs use cases on PostgreSQL: tenant-locked writes, snapshot reads."""

    def __init__(
        self,
        url: str,
        max_hold: timedelta,
        waits: Waits = DEFAULT_WAITS,
        *,
        pool_size: int = DEFAULT_POOL_SIZE,
    ) -> None:
        self._max_hold = max_hold
        self._writer = _engine(url, waits, pool_size, isolation_level="READ COMMITTED")
        self._reader = _engine(url, waits, pool_size, isolation_level="REPEATABLE READ")
        for engine in (self._writer, self._reader):
            check_on_checkout(engine)
        self.retries = 0  # transactions run again after a deadlock

    @classmethod
    async def open(
        cls,
        url: str,
        max_hold: timedelta,
        waits: Waits = DEFAULT_WAITS,
        *,
        pool_size: int = DEFAULT_POOL_SIZE,
    ) -> PostgresStore:
        """Open and migrate; ``waits`` bounds each wait for a connection or a lock,
        ``pool_size`` the connections of each of its two pools (SLOTWARD_DB_POOL_SIZE)."""
        store = cls(url, max_hold, waits, pool_size=pool_size)
        await store.migrate()
        return store

    async def migrate(self) -> None:
        async with self._writer.connect() as conn:
            await conn.run_sync(_migrate)

    async def write(self, fn: Callable[[UnitOfWork], T]) -> T:
        wanted: set[str] = set()  # the locks an attempt found it needed (locks.py)
        for attempt in range(1, MAX_ATTEMPTS + 1):
            try:
                bound = self._bind(fn, writes=True, wanted=wanted)
                return await greenlet_spawn(_transaction, self._writer.sync_engine, bound)
            except LockOrderRetry:
                if attempt == MAX_ATTEMPTS:
                    raise Unavailable("too much contention; retry shortly", retry_after=1) from None
                self.retries += 1
                continue  # at once: this time the locks are waited for, in order
            except DBAPIError as exc:
                if _sqlstate(exc) not in RETRYABLE_SQLSTATES or attempt == MAX_ATTEMPTS:
                    _raise_translated(exc)
            self.retries += 1
            # Jittered backoff, so the losers of one race do not meet again at once.
            await asyncio.sleep(random.uniform(0, 0.002 * min(attempt, 10)))
        raise AssertionError("unreachable")

    async def read(self, fn: Callable[[UnitOfWork], T]) -> T:
        try:
            bound = self._bind(fn, writes=False, wanted=set())
            return await greenlet_spawn(_transaction, self._reader.sync_engine, bound)
        except DBAPIError as exc:
            _raise_translated(exc)

    def _bind(
        self, fn: Callable[[UnitOfWork], T], *, writes: bool, wanted: set[str]
    ) -> Callable[[Connection], T]:
        # SQLAlchemy begins the transaction itself (at the isolation level of
        # the engine), so the unit of work sends no BEGIN of its own.
        max_hold = self._max_hold
        return lambda conn: fn(
            SqlUnitOfWork(conn, max_hold, begin=None, writes=writes, wanted=wanted)
        )

    async def close(self) -> None:
        await self._writer.dispose()
        await self._reader.dispose()


def _transaction(engine: Engine, fn: Callable[[Connection], T]) -> T:
    """``fn`` on a pooled connection: checked out, run and checked in, all in the
    one greenlet the caller spawned (``AsyncConnection`` spawns one for each of
    the three: some 60 µs a transaction). An exhausted pool is a 503 the client
    may retry."""
    try:
        conn = engine.connect()
    except PoolTimeout as exc:
        raise Unavailable("no database connection free; retry shortly", retry_after=1) from exc
    except OSError as exc:  # refused, unreachable: asyncpg raises these unwrapped
        raise Unavailable(f"the database is unreachable: {exc}", retry_after=1) from exc
    with conn:
        return fn(conn)


def _migrate(conn: Connection) -> None:
    # Several processes or hosts may start at once: one migrates, the others
    # wait for it (however long it takes) and then find nothing to do.
    conn.exec_driver_sql("SET LOCAL lock_timeout = 0")
    conn.exec_driver_sql("SET LOCAL statement_timeout = 0")
    conn.exec_driver_sql("SELECT pg_advisory_xact_lock(73912026)")
    upgrade(conn)
    conn.commit()


# Connection exceptions, too many connections, shutdown, lock timeout, a
# statement cancelled (statement_timeout), an idle transaction ended by the
# server: the call may work later.
_UNAVAILABLE_PREFIXES = ("08", "53", "57P", "57014", "55P03", "25P03")


def _raise_translated(exc: DBAPIError) -> NoReturn:
    """Lost connections and exhausted retries are 503s; anything else is a bug."""
    state = _sqlstate(exc) or ""
    if (
        isinstance(exc, OperationalError)
        or exc.connection_invalidated
        or state.startswith(_UNAVAILABLE_PREFIXES)
        or isinstance(exc.orig, OSError)
    ):
        raise Unavailable(f"the database is unavailable: {exc.orig}", retry_after=1) from exc
    if state in RETRYABLE_SQLSTATES:
        raise Unavailable("too much contention; retry shortly", retry_after=1) from exc
    raise exc
