"""Pooled PostgreSQL connections checked at checkout, cheaply.

SQLAlchemy's pool_pre_ping costs three round trips (BEGIN, an empty query,
ROLLBACK) at every checkout: a quarter of a create's. Here a connection the
server closed (a restart, ``pg_terminate_backend``, an idle-session timeout)
is known closed without asking: asyncpg saw its socket end. Only one idle in
the pool for a while, whose socket may be silently dead (a network cut), is
pinged. The idle time is a real duration, read from the monotonic clock, not a
rule's time (tests/test_architecture.py allows this module that).
"""

from __future__ import annotations

import time
from typing import Any

from sqlalchemy import event
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.ext.asyncio import AsyncEngine

__all__ = ["PING_AFTER_IDLE_SECONDS", "check_on_checkout"]

PING_AFTER_IDLE_SECONDS = 1.0


def check_on_checkout(engine: AsyncEngine, idle_seconds: float = PING_AFTER_IDLE_SECONDS) -> None:
    """Replace a pooled connection that is closed, or idle and not answering a ping."""
    pool = engine.sync_engine.pool
    dialect = engine.sync_engine.dialect

    def checkin(dbapi_connection: Any, record: Any) -> None:
        record.info["idle_since"] = time.monotonic()

    def checkout(dbapi_connection: Any, record: Any, proxy: Any) -> None:
        if dbapi_connection._connection.is_closed():
            raise DisconnectionError("the server closed this connection")
        since = record.info.pop("idle_since", None)
        if since is None or time.monotonic() - since < idle_seconds:
            return
        try:
            dialect.do_ping(dbapi_connection)
        except Exception as exc:
            if dialect.is_disconnect(exc, dbapi_connection, None):  # type: ignore[arg-type]
                # The pool throws this connection away and takes another.
                raise DisconnectionError(str(exc)) from exc
            raise

    event.listen(pool, "checkin", checkin)
    event.listen(pool, "checkout", checkout)
