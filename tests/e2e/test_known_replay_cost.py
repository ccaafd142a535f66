"""What a known replay costs SQLite, counted in statements and threads: a ratchet.

A retry sent as its create was is answered from what the process knows of it
(api/replays.py): one read transaction of one statement on the event loop's
own connection, and nothing on the reader threads or the writer. Pinned here,
over a real HTTP server and a real SQLite file, so a lookup added back to that
path is a decision and not an accident. The statements are caught by
sqlite3's own trace.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine
from sqlalchemy.pool import NullPool

from slotward.adapters.store.sqlite.store import SqliteStore
from tests.e2e.conftest import Server

BODY: dict[str, Any] = {
    "workflow_id": "wf-cost",
    "attendees": ["dana@example.com", "erin@example.com"],
    "start": "2030-10-14T14:00:00Z",
    "duration_minutes": 30,
}


@pytest.fixture
def database(tmp_path: Path, sqlite_template: Path) -> Iterator[tuple[str, Engine]]:
    """SQLite alone: the peek is SQLite's (PostgreSQL's reads are on its own pool)."""
    path = tmp_path / "slotward.db"
    shutil.copyfile(sqlite_template, path)
    engine = create_engine(f"sqlite:///{path}", poolclass=NullPool)
    yield f"sqlite:///{path}", engine
    engine.dispose()


def _traced(conn: sqlite3.Connection) -> list[tuple[str, str]]:
    seen: list[tuple[str, str]] = []
    conn.set_trace_callback(lambda sql: seen.append((threading.current_thread().name, sql)))
    return seen


async def test_a_known_replay_is_one_statement_on_the_loop(server: Server) -> None:
    store = server.services.store
    assert isinstance(store, SqliteStore)
    agent = await server.key()
    raw = json.dumps(BODY).encode()
    first = await agent.create(BODY, raw=raw)
    assert first.status == 201
    # The peek connection is opened by the first peek: a replay by another spelling
    # (the whole path's read) opens it without making this call known.
    reworded = await agent.create({**BODY, "attendees": ["Dana@Example.com", "erin@example.com"]})
    assert reworded.replayed
    peek = store._peek_uow
    assert peek is not None
    on_peek = _traced(peek._driver)
    readers = [c.connection.driver_connection for c in store._reader_conns]
    elsewhere = [_traced(c) for c in readers if isinstance(c, sqlite3.Connection)]
    assert elsewhere  # the key's check opened one: traced, it would show any read
    opened = len(store._reader_conns)
    again = await agent.create(BODY, raw=raw)
    assert again.replayed
    assert again.body == first.body
    statements = [sql.split()[0] for _, sql in on_peek]
    assert statements == ["BEGIN", "SELECT", "ROLLBACK"], on_peek
    assert {thread for thread, _ in on_peek} == {threading.current_thread().name}
    assert [s for trace in elsewhere for s in trace] == []  # no reader thread was used
    assert len(store._reader_conns) == opened  # nor one opened for it
