"""Writes on the event loop's own thread, and what goes to the writer thread instead.

A write runs on the loop's thread when the file's turn and SQLite's lock are
free at once (adapters/store/sqlite/loop_writer.py). When another process
writes, the loop never waits for it: the call goes to the writer thread, which
waits, while the loop goes on serving. Real SQLite files; "another process" is
another open of the turn file or another connection, which lock exactly as a
process's would (``flock`` locks an open file; SQLite locks per connection).
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, Engine, create_engine

from slotward.adapters.store.sqlite.groups import Call, GroupRunner, LoopSettle
from slotward.adapters.store.sqlite.loop_writer import LoopWriter
from slotward.adapters.store.sqlite.store import SqliteStore
from slotward.adapters.store.sqlite.turns import WriterTurn, turn_file
from slotward.adapters.store.waits import DEFAULT_WAITS, Waits
from slotward.engine.errors import Unavailable
from slotward.engine.ports import UnitOfWork

EVENT_WAIT = 30.0  # a guard against a hang, never a timing assertion


def _create_table(uow: UnitOfWork) -> None:
    with uow:
        _conn(uow).exec_driver_sql("CREATE TABLE notes (id INTEGER PRIMARY KEY, thread INTEGER)")
        uow.commit()


def _conn(uow: UnitOfWork) -> Connection:
    conn: Connection = uow._conn  # type: ignore[attr-defined]
    return conn


def _note(i: int) -> Callable[[UnitOfWork], int]:
    """A write that records the thread it ran on, and answers that thread."""

    def run(uow: UnitOfWork) -> int:
        with uow:
            thread = threading.get_ident()
            _conn(uow).exec_driver_sql("INSERT INTO notes VALUES (?, ?)", (i, thread))
            uow.commit()
        return thread

    return run


def _ids(path: Path) -> list[int]:
    with sqlite3.connect(path) as conn:
        return [r[0] for r in conn.execute("SELECT id FROM notes ORDER BY id")]


async def _opened(path: Path, waits: Waits | None = None) -> SqliteStore:
    store = SqliteStore(path, timedelta(hours=24), waits=waits or DEFAULT_WAITS)
    store.migrate()
    store.run_write_sync(_create_table)
    return store


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    opened = await _opened(tmp_path / "w.db")
    try:
        yield opened
    finally:
        await opened.close()


class _OtherProcessTurn:
    """The file's turn held by another writer: its own open of the turn file.

    Given back after ``EVENT_WAIT`` at the latest, from a thread: a loop that
    blocked on it would then fail the test, not hang it."""

    def __init__(self, database: Path) -> None:
        self._fd = os.open(turn_file(database), os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        self._lock = threading.Lock()
        self._guard = threading.Timer(EVENT_WAIT, self.release)
        self._guard.start()

    def release(self) -> None:
        with self._lock:
            if self._fd >= 0:
                self._guard.cancel()
                fcntl.flock(self._fd, fcntl.LOCK_UN)
                os.close(self._fd)
                self._fd = -1


async def _ticks_while(task: asyncio.Task[int], ticks: int = 20) -> int:
    """Turns of the loop taken while ``task`` waits: the loop was never stopped."""
    done = 0
    for _ in range(ticks):
        await asyncio.sleep(0.005)
        assert not task.done()
        done += 1
    return done


async def test_writes_from_the_loop_run_on_its_thread_a_turn_at_a_time(
    store: SqliteStore, tmp_path: Path
) -> None:
    before = store.writer_stats()
    threads = await asyncio.gather(*(store.write(_note(i)) for i in range(5)))
    assert set(threads) == {threading.get_ident()}
    after = store.writer_stats()
    assert (after.groups - before.groups, after.grouped_calls - before.grouped_calls) == (1, 5)
    assert await store.write(_note(9)) == threading.get_ident()  # alone, the next turn
    assert _ids(tmp_path / "w.db") == [0, 1, 2, 3, 4, 9]


async def test_another_process_turn_sends_the_write_to_the_thread_and_the_loop_goes_on(
    store: SqliteStore, tmp_path: Path
) -> None:
    other = _OtherProcessTurn(tmp_path / "w.db")
    try:
        task = asyncio.create_task(store.write(_note(1)))
        assert await _ticks_while(task) == 20  # waiting, on a thread: the loop serves on
        assert _ids(tmp_path / "w.db") == []
    finally:
        other.release()
    thread = await asyncio.wait_for(task, EVENT_WAIT)
    assert thread != threading.get_ident()  # the writer thread waited for the turn
    assert _ids(tmp_path / "w.db") == [1]
    assert await store.write(_note(2)) == threading.get_ident()  # free again: the loop's


async def test_sqlites_lock_taken_without_the_turn_sends_the_write_to_the_thread(
    store: SqliteStore, tmp_path: Path
) -> None:
    # A writer that takes no turn (a migration, the sqlite3 shell): SQLite's own lock.
    other = sqlite3.connect(tmp_path / "w.db", isolation_level=None, check_same_thread=False)
    other.execute("BEGIN IMMEDIATE")
    other.execute("INSERT INTO notes VALUES (100, 0)")
    done = threading.Lock()

    def commit() -> None:  # once; after EVENT_WAIT from a thread if the loop is stuck
        if done.acquire(blocking=False):
            other.execute("COMMIT")
            other.close()

    guard = threading.Timer(EVENT_WAIT, commit)
    guard.start()
    try:
        task = asyncio.create_task(store.write(_note(1)))
        assert await _ticks_while(task) == 20
    finally:
        guard.cancel()
        commit()
    assert await asyncio.wait_for(task, EVENT_WAIT) != threading.get_ident()
    assert _ids(tmp_path / "w.db") == [1, 100]


async def test_a_call_in_line_for_the_thread_too_long_is_refused_and_never_runs(
    tmp_path: Path,
) -> None:
    store = await _opened(tmp_path / "w.db", Waits(queue_seconds=0.2))
    other = _OtherProcessTurn(tmp_path / "w.db")
    try:
        first = asyncio.create_task(store.write(_note(1)))  # the thread takes it, and waits
        await asyncio.sleep(0.05)
        second = asyncio.create_task(store.write(_note(2)))  # in line behind it
        with pytest.raises(Unavailable):
            await asyncio.wait_for(second, EVENT_WAIT)
    finally:
        other.release()
    assert await asyncio.wait_for(first, EVENT_WAIT) != threading.get_ident()
    assert _ids(tmp_path / "w.db") == [1]  # the refused call did nothing
    await store.close()


async def test_a_write_from_another_event_loop_runs_on_the_writer_thread(
    store: SqliteStore, tmp_path: Path
) -> None:
    assert await store.write(_note(1)) == threading.get_ident()  # this loop's, here

    def elsewhere() -> tuple[int, int]:
        return asyncio.run(store.write(_note(2))), threading.get_ident()

    ran_on, caller = await asyncio.to_thread(elsewhere)
    assert ran_on not in (caller, threading.get_ident())
    assert _ids(tmp_path / "w.db") == [1, 2]


async def test_while_the_thread_has_calls_handed_to_it_the_next_ones_follow_them(
    tmp_path: Path,
) -> None:
    # The loop's writer itself, on a real file and turn; what it hands on is kept
    # in a list here (the writer thread's queue, in the store).
    path = tmp_path / "w.db"
    store = await _opened(path)
    await store.close()  # the file has its table; this test drives a LoopWriter alone
    engine = create_engine(f"sqlite:///{path}", connect_args={"check_same_thread": False})
    handed: list[Call[Any]] = []
    runner = GroupRunner(lambda: _no_wait(engine), timedelta(hours=24), lambda exc: exc)
    here = LoopWriter(runner, WriterTurn(path), handed.append)
    loop = asyncio.get_running_loop()
    assert here.serves(loop)

    def call(i: int) -> tuple[Call[Any], asyncio.Future[int]]:
        future: asyncio.Future[int] = loop.create_future()
        return Call(_note(i), lambda: None, LoopSettle(loop, future)), future

    try:
        other = _OtherProcessTurn(path)
        first, first_answer = call(1)
        here.submit(first)
        here.flush()
        other.release()
        assert handed == [first]  # the turn was taken: handed on
        second, second_answer = call(2)
        here.submit(second)
        here.flush()
        assert handed == [first, second]  # the turn is free, but the first is not answered
        first_answer.set_result(0)
        second_answer.set_result(0)
        await asyncio.sleep(0)  # their done callbacks run
        third, third_answer = call(3)
        here.submit(third)
        here.flush()
        assert handed == [first, second]
        assert await third_answer == threading.get_ident()  # run here
        assert _ids(path) == [3]
    finally:
        here.close()
        engine.dispose()


def _no_wait(engine: Engine) -> Connection:
    conn = engine.connect()
    conn.exec_driver_sql("PRAGMA busy_timeout=0")
    return conn
