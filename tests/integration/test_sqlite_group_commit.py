"""Group commit on a real SQLite file: calls share a COMMIT, never a fate they wouldn't alone.

Calls that reach the store together run as one group, in one transaction
(adapters/store/sqlite/groups.py), in either of the two places that run them:
- on the event loop's thread (sqlite/loop_writer.py): the calls made in one
  turn of the loop form one group, so tasks started together do;
- on the writer thread (sqlite/writer.py): a first call that waits on an event
  keeps the thread busy while the others queue, so they form one group.
Every test of a group's meaning runs in both places.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, create_engine, text
from sqlalchemy.exc import IntegrityError, OperationalError

from slotward.adapters.store.sqlite.store import SqliteStore
from slotward.adapters.store.sqlite.writer import GroupWriter
from slotward.engine.errors import Unavailable
from slotward.engine.ports import UnitOfWork

EVENT_WAIT = 30.0  # a guard against a hang, never a timing assertion


@contextlib.asynccontextmanager
async def _opened(path: Path, *, on_loop: bool) -> AsyncIterator[SqliteStore]:
    opened = SqliteStore(path, timedelta(hours=24), writes_on_loop=on_loop)
    opened.migrate()
    opened.run_write_sync(_create_tables)
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture(params=["loop", "thread"])
async def store(tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[SqliteStore]:
    """Writes on the event loop's thread, or (``thread``) all on the writer thread."""
    async with _opened(tmp_path / "g.db", on_loop=request.param == "loop") as opened:
        yield opened


@pytest.fixture
async def thread_store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    """All writes on the writer thread, where a call may block it while others queue."""
    async with _opened(tmp_path / "g.db", on_loop=False) as opened:
        yield opened


def _on_loop(store: SqliteStore) -> bool:
    return store._here is not None


def _conn(uow: UnitOfWork) -> Connection:
    conn: Connection = uow._conn  # type: ignore[attr-defined]
    return conn


def _sql(uow: UnitOfWork, statement: str) -> None:
    """A statement through the unit of work's runner, as the repositories run theirs."""
    uow._db.sql(statement)  # type: ignore[attr-defined]


def _create_tables(uow: UnitOfWork) -> None:
    with uow:
        conn = _conn(uow)
        conn.exec_driver_sql("CREATE TABLE notes (id INTEGER PRIMARY KEY, note TEXT)")
        # Checked at COMMIT only: a way to make one group's COMMIT fail.
        conn.exec_driver_sql(
            "CREATE TABLE refs (id INTEGER PRIMARY KEY, note_id INTEGER"
            " REFERENCES notes(id) DEFERRABLE INITIALLY DEFERRED)"
        )
        uow.commit()


def _note(i: int, *, then: Callable[[], None] | None = None) -> Callable[[UnitOfWork], int]:
    def run(uow: UnitOfWork) -> int:
        with uow:
            _conn(uow).execute(text("INSERT INTO notes VALUES (:i, :n)"), {"i": i, "n": f"n{i}"})
            if then is not None:
                then()
            uow.commit()
        return i

    return run


def _ids(store: SqliteStore) -> list[int]:
    def read(uow: UnitOfWork) -> list[int]:
        with uow:
            return [r[0] for r in _conn(uow).exec_driver_sql("SELECT id FROM notes ORDER BY id")]

    return store.run_write_sync(read)


class _Gate:
    """A first call that holds the writer until ``open``: the calls behind it queue."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def call(self, uow: UnitOfWork) -> int:
        self.entered.set()
        assert self.release.wait(EVENT_WAIT)
        return 0

    async def hold(self, store: SqliteStore) -> asyncio.Task[int]:
        task = asyncio.create_task(store.write(self.call))
        assert await asyncio.to_thread(self.entered.wait, EVENT_WAIT)
        return task


async def _queued(store: SqliteStore, calls: list[Callable[[UnitOfWork], Any]]) -> list[Any]:
    """Run ``calls`` as one group; their answers or errors, in order.

    On the loop's thread: tasks started in one turn of the loop. On the writer
    thread: behind a gate that holds it."""
    if _on_loop(store):
        before = store.writer_stats()
        tasks = [asyncio.create_task(store.write(c)) for c in calls]
        answers = await asyncio.gather(*tasks, return_exceptions=True)
        after = store.writer_stats()
        assert after.groups - before.groups == 1
        assert after.grouped_calls - before.grouped_calls == len(calls)
        return answers
    gate = _Gate()
    held = await gate.hold(store)
    tasks = [asyncio.create_task(store.write(c)) for c in calls]
    await asyncio.sleep(0)  # the tasks start: each puts its call in the writer's queue
    before = store.writer_stats()
    gate.release.set()
    await held
    answers = await asyncio.gather(*tasks, return_exceptions=True)
    after = store.writer_stats()
    # They really ran as one group (the gate's call was a group of its own).
    assert after.groups - before.groups == 1
    assert after.grouped_calls - before.grouped_calls == len(calls)
    return answers


async def test_queued_calls_commit_together_and_each_sees_the_last(store: SqliteStore) -> None:
    seen: list[list[int]] = []

    def reader(uow: UnitOfWork) -> None:
        with uow:
            rows = _conn(uow).exec_driver_sql("SELECT id FROM notes ORDER BY id")
            seen.append([r[0] for r in rows])

    answers = await _queued(store, [_note(1), _note(2), reader, _note(3)])
    assert answers == [1, 2, None, 3]
    assert seen == [[1, 2]]  # the calls before it in the group, uncommitted still
    assert _ids(store) == [1, 2, 3]


async def test_a_failing_call_undoes_only_its_own_work(store: SqliteStore) -> None:
    def fail() -> None:
        raise ValueError("refused after writing")

    answers = await _queued(store, [_note(1), _note(2, then=fail), _note(3)])
    assert answers[::2] == [1, 3]
    assert isinstance(answers[1], ValueError)
    assert _ids(store) == [1, 3]


async def test_work_committed_before_an_error_is_kept(store: SqliteStore) -> None:
    def commit_then_fail(uow: UnitOfWork) -> None:
        with uow:
            _sql(uow, "INSERT INTO notes VALUES (5, 'audited refusal')")
            uow.commit()
            # After a commit the call's next savepoint opens with its next
            # statement through the unit of work (adapters/store/sqlite/writer.py).
            _sql(uow, "INSERT INTO notes VALUES (6, 'undone')")
            raise LookupError("refused")

    answers = await _queued(store, [_note(1), commit_then_fail, _note(2)])
    assert answers[::2] == [1, 2]
    assert isinstance(answers[1], LookupError)
    assert _ids(store) == [1, 2, 5]  # as alone: what was committed stays, 6 does not


async def test_a_database_error_reruns_the_others_alone(store: SqliteStore) -> None:
    # The same primary key twice: the second call's INSERT fails in the database.
    answers = await _queued(store, [_note(1), _note(7), _note(7), _note(2)])
    assert [answers[0], answers[1], answers[3]] == [1, 7, 2]
    assert isinstance(answers[2], IntegrityError)
    assert _ids(store) == [1, 2, 7]


async def test_a_failed_commit_fails_every_call_of_the_group(store: SqliteStore) -> None:
    def dangling(uow: UnitOfWork) -> None:
        with uow:
            _conn(uow).exec_driver_sql("INSERT INTO refs VALUES (1, 999)")  # no note 999
            uow.commit()

    answers = await _queued(store, [_note(1), dangling, _note(2)])
    assert all(isinstance(a, IntegrityError) for a in answers), answers
    assert _ids(store) == []  # none of the group is stored
    assert await store.write(_note(3)) == 3  # and the writer goes on


async def test_no_answer_leaves_before_the_group_commits_on_the_loop(tmp_path: Path) -> None:
    other = create_engine(f"sqlite:///{tmp_path / 'g.db'}")
    seen: list[Any] = []
    first: asyncio.Task[int] | None = None

    def last(uow: UnitOfWork) -> int:
        with uow:
            assert first is not None
            # The first call is done and kept, but neither answered nor committed:
            # another connection (another process) sees nothing of the group.
            with other.connect() as conn:
                seen.append(
                    (first.done(), [r[0] for r in conn.exec_driver_sql("SELECT id FROM notes")])
                )
            uow.commit()
        return 9

    try:
        async with _opened(tmp_path / "g.db", on_loop=True) as store:
            first = asyncio.create_task(store.write(_note(1)))
            second = asyncio.create_task(store.write(last))
            assert list(await asyncio.gather(first, second)) == [1, 9]
            assert seen == [(False, [])]
            assert _ids(store) == [1]
    finally:
        other.dispose()


async def test_no_answer_leaves_before_the_group_commits(thread_store: SqliteStore) -> None:
    store = thread_store
    last_entered = threading.Event()
    last_release = threading.Event()

    def slow_last(uow: UnitOfWork) -> int:
        with uow:
            last_entered.set()
            assert last_release.wait(EVENT_WAIT)
            uow.commit()
        return 9

    gate = _Gate()
    held = await gate.hold(store)
    first = asyncio.create_task(store.write(_note(1)))
    last = asyncio.create_task(store.write(slow_last))
    await asyncio.sleep(0)
    gate.release.set()
    await held
    assert await asyncio.to_thread(last_entered.wait, EVENT_WAIT)
    # The first call is done and its savepoint released, but not committed yet.
    await asyncio.sleep(0.05)
    assert not first.done()
    last_release.set()
    assert list(await asyncio.gather(first, last)) == [1, 9]
    assert _ids(store) == [1]


async def test_a_second_process_sees_only_committed_groups(thread_store: SqliteStore) -> None:
    store = thread_store
    # A reader of its own (another process, say) sees nothing of a group before
    # its COMMIT: the group is one transaction.
    url = str(store._path)
    other = create_engine(f"sqlite:///{url}")
    inside = threading.Event()
    go_on = threading.Event()
    outside_view: list[int] = []

    def wait_inside() -> None:
        inside.set()
        assert go_on.wait(EVENT_WAIT)

    try:
        gate = _Gate()
        held = await gate.hold(store)
        tasks = [
            asyncio.create_task(store.write(_note(1))),
            asyncio.create_task(store.write(_note(2, then=wait_inside))),
        ]
        await asyncio.sleep(0)
        gate.release.set()
        await held
        assert await asyncio.to_thread(inside.wait, EVENT_WAIT)
        with other.connect() as conn:
            outside_view = [r[0] for r in conn.exec_driver_sql("SELECT id FROM notes")]
        go_on.set()
        assert await asyncio.gather(*tasks) == [1, 2]
    finally:
        other.dispose()
    assert outside_view == []
    assert _ids(store) == [1, 2]


async def test_the_writer_outlives_a_connection_it_cannot_open(tmp_path: Path) -> None:
    # The writer's first connection fails to open (too many open files, say):
    # the calls waiting for it are answered 503 at once, and the next ones work.
    engine = create_engine(f"sqlite:///{tmp_path / 'w.db'}")
    attempts: list[int] = []

    def connect() -> Connection:
        attempts.append(1)
        if len(attempts) == 1:
            raise OperationalError("connect", {}, sqlite3.OperationalError("too many open files"))
        return engine.connect()

    writer = GroupWriter(connect, timedelta(hours=24), lambda exc: exc)
    try:
        failed = writer.submit_future(_note_table)
        with pytest.raises(Unavailable):
            failed.result(timeout=EVENT_WAIT)
        assert writer.submit_future(_note_table).result(timeout=EVENT_WAIT) == "made"
    finally:
        writer.close()
        engine.dispose()


def _note_table(uow: UnitOfWork) -> str:
    with uow:
        _conn(uow).exec_driver_sql("CREATE TABLE notes (id INTEGER PRIMARY KEY)")
        uow.commit()
    return "made"


class _Trace:
    """A first call of a group that records the statements on the writer's connection."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self._raw: Any = None

    def start(self, uow: UnitOfWork) -> None:
        self._raw = _conn(uow).connection.dbapi_connection
        self._raw.set_trace_callback(self.sent.append)

    def stop(self) -> list[str]:
        self._raw.set_trace_callback(None)
        return self.sent


async def test_a_group_runs_without_savepoints_when_no_call_needs_one(store: SqliteStore) -> None:
    trace = _Trace()

    def refuse_after_commit(uow: UnitOfWork) -> None:
        with uow:
            _sql(uow, "INSERT INTO notes VALUES (5, 'audited refusal')")
            uow.commit()
            raise LookupError("refused")  # a conflict's way: its audit kept, then raised

    def read_and_refuse(uow: UnitOfWork) -> None:
        with uow:
            _conn(uow).exec_driver_sql("SELECT count(*) FROM notes").all()
            raise ValueError("invalid")

    calls = [trace.start, _note(1), refuse_after_commit, read_and_refuse, _note(2)]
    answers = await _queued(store, calls)
    sent = trace.stop()
    assert answers[1] == 1
    assert answers[4] == 2
    assert isinstance(answers[2], LookupError)
    assert isinstance(answers[3], ValueError)
    assert not [s for s in sent if "SAVEPOINT" in s or s in ("ROLLBACK", "BEGIN IMMEDIATE")]
    assert sent[-1] == "COMMIT"
    assert _ids(store) == [1, 2, 5]


async def test_a_call_leaving_work_to_undo_has_the_group_run_again_with_savepoints(
    store: SqliteStore,
) -> None:
    trace = _Trace()
    runs: list[int] = []

    def counted(i: int) -> Callable[[UnitOfWork], int]:
        note = _note(i)

        def run(uow: UnitOfWork) -> int:
            runs.append(i)
            return note(uow)

        return run

    def fail() -> None:
        raise ValueError("refused after writing")

    answers = await _queued(store, [trace.start, counted(1), _note(2, then=fail), counted(3)])
    sent = trace.stop()
    assert answers[1] == 1
    assert answers[3] == 3
    assert isinstance(answers[2], ValueError)
    assert _ids(store) == [1, 3]
    # The first pass stopped at the call that left work to undo and was rolled
    # back; the second ran every call, each in a savepoint: once more, not more.
    assert runs == [1, 1, 3]
    assert sent.count("ROLLBACK") == 1
    assert sent.count("BEGIN IMMEDIATE") == 1
    assert sent.index("ROLLBACK") < sent.index("BEGIN IMMEDIATE") < sent.index("SAVEPOINT call")
    assert sent[-1] == "COMMIT"


async def test_a_call_that_writes_and_ends_without_committing_is_undone(
    store: SqliteStore,
) -> None:
    def forgets_to_commit(uow: UnitOfWork) -> int:
        with uow:
            _sql(uow, "INSERT INTO notes VALUES (4, 'never committed')")
        return 4

    answers = await _queued(store, [_note(1), forgets_to_commit, _note(2)])
    assert answers == [1, 4, 2]
    assert _ids(store) == [1, 2]  # as alone: what a call did not commit is undone
