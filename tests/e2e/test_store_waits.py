"""No request hangs on a blocked store: every wait (a lock, a queue, a pool)
ends within the store timeout as a retryable 503 that did nothing.

An operator's session holds the lock the server needs (SQLite's write lock on
the file; PostgreSQL's advisory lock of the tenant), as a stuck process would.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import text

from slotward.adapters.store.sqlite.store import SqliteStore
from tests.e2e.conftest import HOLD_BODY, Client, Server

WAIT_SECONDS = 0.5


@pytest.fixture
def config_overrides() -> dict[str, Any]:
    return {"lock_timeout_seconds": WAIT_SECONDS}


@contextlib.contextmanager
def _store_blocked(server: Server, tenant: str = "acme") -> Iterator[None]:
    """Hold, from outside the server, the lock its writes for ``tenant`` need."""
    if isinstance(server.services.store, SqliteStore):
        conn = server.db.raw_connection()
        try:
            raw: Any = conn.driver_connection
            assert isinstance(raw, sqlite3.Connection)
            raw.isolation_level = None
            raw.execute("BEGIN IMMEDIATE")
            yield
            raw.execute("ROLLBACK")
        finally:
            conn.close()
        return
    with server.db.connect() as pg, pg.begin():
        pg.execute(text("SELECT pg_advisory_xact_lock(hashtextextended(:t, 0))"), {"t": tenant})
        yield


def _unavailable(answer: Any) -> None:
    assert answer.status == 503, answer.json
    assert answer.json["code"] == "store_unavailable"
    assert answer.json["retryable"] is True
    assert answer.headers["Retry-After"] == "1"


async def _acquire(agent: Client) -> Any:
    body = {"workflow_id": "wf-1", "tool": "send_email", "arguments": {"to": "a@example.com"}}
    return await agent.post("/v1/executions", body)


async def test_a_blocked_store_answers_503_and_the_retry_lands_once(server: Server) -> None:
    agent = await server.key()
    with _store_blocked(server):
        _unavailable(await agent.create(dict(HOLD_BODY)))
        _unavailable(await _acquire(agent))
        assert (await agent.get("/v1/holds")).status == 200  # reads do not wait on writers
    assert server.table_counts()["holds"] == 0
    assert server.table_counts()["ledger"] == 0
    created = await agent.create(dict(HOLD_BODY))
    assert created.status == 201
    assert created.headers["Idempotent-Replayed"] == "false"  # the 503 had done nothing
    assert (await _acquire(agent)).status == 201
    assert server.table_counts()["holds"] == 1


async def test_what_a_tenant_lock_holds_up_depends_on_the_store(server: Server) -> None:
    other = await server.key(tenant="globex")
    acme = await server.key()
    with _store_blocked(server, tenant="acme"):
        answer = await other.create(dict(HOLD_BODY))
        if isinstance(server.services.store, SqliteStore):
            _unavailable(answer)  # one writer for the whole file: every tenant waits
        else:
            assert answer.status == 201  # another tenant's lock is not its own
        _unavailable(await acme.create(dict(HOLD_BODY)))
