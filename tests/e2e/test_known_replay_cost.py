"""What a known replay costs SQLite, counted in statements and threads: a ratchet.

A retry sent as its create was is answered from what the process knows of it
(api/replays.py): one statement, with no transaction around it, on the event loop's
own connection, and nothing on the reader threads or the writer; at
``POST /v1/holds`` and for a create tool call alike. Pinned here,
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
from slotward.api.http.jsonbody import decode_body
from slotward.engine.tools import CREATE_HOLD
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


class Traces:
    """Every statement run on the peek connection and on the reader threads' from now."""

    def __init__(self, store: SqliteStore) -> None:
        peek = store._peek_uow
        assert peek is not None
        self.on_peek = _traced(peek._driver)
        readers = [c.connection.driver_connection for c in store._reader_conns]
        self.elsewhere = [_traced(c) for c in readers if isinstance(c, sqlite3.Connection)]
        assert self.elsewhere  # the key's check opened one: traced, it would show any read
        self._store = store
        self._opened = len(store._reader_conns)

    def assert_one_statement_on_the_loop(self) -> None:
        statements = [sql.split()[0] for _, sql in self.on_peek]
        # One statement, and no transaction around it (adapters/store/sqlite/peeks.py).
        assert statements == ["SELECT"], self.on_peek
        assert {thread for thread, _ in self.on_peek} == {threading.current_thread().name}
        assert [s for trace in self.elsewhere for s in trace] == []  # no reader thread was used
        assert len(self._store._reader_conns) == self._opened  # nor one opened for it


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
    traces = Traces(store)
    again = await agent.create(BODY, raw=raw)
    assert again.replayed
    assert again.body == first.body
    traces.assert_one_statement_on_the_loop()


TOOL_ARGS = {key: value for key, value in BODY.items() if key != "workflow_id"}


async def test_a_create_tool_call_sent_again_is_a_known_replay(server: Server) -> None:
    store = server.services.store
    assert isinstance(store, SqliteStore)
    agent = await server.key()
    beside = {"workflow_id": BODY["workflow_id"], "step": 1}
    call = {"id": "call_1", "type": "function",
            "function": {"name": CREATE_HOLD.name, "arguments": json.dumps(TOOL_ARGS)}}  # fmt: skip
    first = await agent.post("/v1/tool-calls", {**beside, **call})
    assert first.status == 201
    reworded = {**TOOL_ARGS, "attendees": ["Dana@Example.com", "erin@example.com"]}
    assert (await agent.post("/v1/tool-calls", {**beside, **call,
            "function": {"name": CREATE_HOLD.name, "arguments": reworded}})).replayed  # fmt: skip
    traces = Traces(store)
    # The same call in another model's format, under another call id: its
    # arguments, workflow and step make it the same call.
    anthropic = {"type": "tool_use", "id": "toolu_9", "name": CREATE_HOLD.name, "input": TOOL_ARGS}
    again = await agent.post("/v1/tool-calls", {**beside, **anthropic})
    assert again.replayed
    assert again.body == first.body
    traces.assert_one_statement_on_the_loop()


class Decodes:
    """How many tool-call bodies the handler decoded (the real decoder, counted)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0

        def counted(raw: bytes, **kw: Any) -> object:
            self.count += 1
            return decode_body(raw, **kw)

        monkeypatch.setattr("slotward.api.http.tool_handlers.decode_body", counted)


async def test_a_tool_call_sent_again_byte_for_byte_is_replayed_before_its_body_is_read(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = server.services.store
    assert isinstance(store, SqliteStore)
    agent = await server.key()
    decodes = Decodes(monkeypatch)
    call = {"workflow_id": BODY["workflow_id"], "step": 2, "id": "call_1", "type": "function",
            "function": {"name": CREATE_HOLD.name, "arguments": json.dumps(TOOL_ARGS)}}  # fmt: skip
    raw = json.dumps(call).encode()
    first = await agent.post("/v1/tool-calls", raw=raw)
    assert (first.status, first.replayed, decodes.count) == (201, False, 1)
    # Any other bytes of the same call take the whole path, and replay it there
    # (which opens the peek's connection, for the trace below).
    other_id = await agent.post("/v1/tool-calls", raw=json.dumps({**call, "id": "call_2"}).encode())
    assert (other_id.replayed, other_id.body, decodes.count) == (True, first.body, 2)
    traces = Traces(store)
    again = await agent.post("/v1/tool-calls", raw=raw)
    assert (again.status, again.replayed, decodes.count) == (201, True, 2)  # not decoded
    assert (again.body, again.key) == (first.body, first.key)
    traces.assert_one_statement_on_the_loop()
    # So do the same bytes answered in another form, or under a client's key.
    shaped = await agent.post("/v1/tool-calls?reply=openai", raw=raw)
    assert (shaped.status, decodes.count) == (200, 3)
    assert json.loads(shaped.body)["tool_call_id"] == "call_1"
    keyed = await agent.post("/v1/tool-calls", raw=raw, headers={"Idempotency-Key": "mine-1"})
    assert (keyed.status, decodes.count) == (201, 4)  # the whole path: the intent's live hold


async def test_a_tool_call_by_another_caller_is_not_replayed_by_its_bytes(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = await server.key(), await server.key(agent="agent-b")
    decodes = Decodes(monkeypatch)
    call = {"workflow_id": "wf-two-callers", "tool": CREATE_HOLD.name,
            "arguments": {**TOOL_ARGS, "attendees": ["fay@example.com"]}}  # fmt: skip
    raw = json.dumps(call).encode()
    mine = await first.post("/v1/tool-calls", raw=raw)
    theirs = await second.post("/v1/tool-calls", raw=raw)
    assert (mine.status, theirs.status, decodes.count) == (201, 201, 2)
    assert theirs.replayed  # the same intent in the tenant: replayed by the whole path
    assert theirs.key == mine.key
