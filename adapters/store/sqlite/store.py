"""The embedded store: one SQLite file in WAL mode.

Every write call runs whole inside a transaction opened with ``BEGIN
IMMEDIATE``, so writers serialize even across processes sharing the file: two
claims on one attendee cannot both pass the conflict check. The calls that
reach the store together commit together (sqlite/groups.py), on the event
loop's own thread (sqlite/loop_writer.py), or on one writer thread that owns a
connection of its own when the file's lock is not free at once or the caller
is not on the loop (sqlite/writer.py). Reads run on a small pool of reader
threads, each in a deferred transaction that sees one consistent snapshot,
or, a few point lookups, on the caller's thread (``peek``).
"""

from __future__ import annotations

import asyncio
import queue
import sqlite3
import threading
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError
from sqlalchemy.pool import NullPool

from slotward.adapters.store.migrate import upgrade
from slotward.adapters.store.repos import SqlUnitOfWork
from slotward.adapters.store.sqlite.checkpoint import Checkpointer
from slotward.adapters.store.sqlite.groups import (
    Call,
    GroupRunner,
    LoopSettle,
    Settle,
    WriterStats,
)
from slotward.adapters.store.sqlite.loop_writer import LoopWriter
from slotward.adapters.store.sqlite.peeks import PeekUnitOfWork
from slotward.adapters.store.sqlite.turns import WriterTurn
from slotward.adapters.store.sqlite.writer import GroupWriter
from slotward.adapters.store.waits import DEFAULT_WAITS, Waits
from slotward.engine.errors import InvalidRequest, Unavailable
from slotward.engine.ports import UnitOfWork

__all__ = ["SqliteStore", "sqlite_path"]

T = TypeVar("T")


def sqlite_path(url: str) -> Path:
    """The file of a ``sqlite:///`` or ``sqlite+aiosqlite:///`` URL."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or not parsed.database:
        raise InvalidRequest(f"not a SQLite file URL: {url!r}", code="invalid_db_url")
    if parsed.database == ":memory:":
        raise InvalidRequest("an in-memory SQLite database cannot be shared", code="invalid_db_url")
    return Path(parsed.database)


def _engine(path: Path, waits: Waits) -> Engine:
    # Connections are closed by whoever shuts the store down, not by their thread.
    engine = create_engine(
        f"sqlite:///{path}",
        poolclass=NullPool,
        connect_args={"check_same_thread": False},
        hide_parameters=True,  # errors are logged: never with stored bodies or tokens in them
    )

    @event.listens_for(engine, "connect")
    def _setup(dbapi_conn: Any, _record: Any) -> None:
        # Let us issue BEGIN ourselves (IMMEDIATE for writers), not pysqlite.
        dbapi_conn.isolation_level = None
        cursor = dbapi_conn.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute(f"PRAGMA busy_timeout={Waits.millis(waits.lock_seconds)}")
        cursor.execute("PRAGMA foreign_keys=ON")
        # Pages read through a memory map, not copied in by a read() each: a reader's
        # page cache starts over whenever the writer has changed the file, so a replay
        # or a lookup re-reads its pages every time. 2,160 -> 1,840 us of server CPU
        # per create, 1,300 -> 1,240 per replay (slotward bench replay, same machine).
        cursor.execute(f"PRAGMA mmap_size={MMAP_BYTES}")
        # Checkpoints run on a thread of their own (sqlite_checkpoint.py).
        cursor.execute("PRAGMA wal_autocheckpoint=0")
        cursor.close()

    return engine


MMAP_BYTES = 1 << 30  # address space, not memory: the OS pages it in and out


def _translated(fn: Callable[[UnitOfWork], T], uow: UnitOfWork) -> T:
    try:
        return fn(uow)
    except OperationalError as exc:
        raise _unavailable(exc) from exc


def _unavailable(exc: BaseException) -> BaseException:
    if not isinstance(exc, OperationalError):
        return exc
    # Locked past busy_timeout, disk full, file gone: the call may work later.
    error = Unavailable(f"the database is unavailable: {exc.orig}", retry_after=1)
    error.__cause__ = exc
    return error


class _Job:
    """A call in line for a thread: started by the thread or abandoned by its
    caller, whichever comes first, never both."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._started = False
        self._abandoned = False

    def start(self) -> None:
        with self._lock:
            if self._abandoned:
                raise _busy()
            self._started = True

    def abandon(self) -> bool:
        """Abandon the call unless a thread has started it; True if abandoned."""
        with self._lock:
            self._abandoned = not self._started
            return self._abandoned


def _busy() -> Unavailable:
    return Unavailable("the store is too busy; retry shortly", retry_after=1)


class _ReaderPool:
    """Reader threads taking calls from one queue (lighter than an executor per call)."""

    def __init__(self, size: int, run: Callable[[Callable[[UnitOfWork], Any]], Any]) -> None:
        self._run = run
        self._calls: queue.SimpleQueue[tuple[Any, _Job, Settle] | None] = queue.SimpleQueue()
        self._threads = [
            threading.Thread(target=self._loop, name=f"slotward-reader-{i}", daemon=True)
            for i in range(size)
        ]
        for thread in self._threads:
            thread.start()

    def submit(self, fn: Callable[[UnitOfWork], Any], job: _Job, settle: Settle) -> None:
        self._calls.put((fn, job, settle))

    def _loop(self) -> None:
        while (item := self._calls.get()) is not None:
            fn, job, settle = item
            try:
                job.start()
                value = self._run(fn)
            except BaseException as exc:
                settle(False, exc)
            else:
                settle(True, value)

    def close(self) -> None:
        for _ in self._threads:
            self._calls.put(None)
        for thread in self._threads:
            thread.join()


class SqliteStore:
    """Runs use cases on a SQLite file: writes on one thread, reads on a pool."""

    def __init__(
        self,
        path: Path,
        max_hold: timedelta,
        readers: int = 4,
        waits: Waits = DEFAULT_WAITS,
        checkpoint_seconds: float = 0.5,
        *,
        writes_on_loop: bool = True,
    ) -> None:
        """``writes_on_loop``: write calls run on the event loop's thread when
        the file's lock is free (False: all on the writer thread)."""
        self._path = path
        self._max_hold = max_hold
        self._queue_seconds = waits.queue_seconds
        self._engine = _engine(path, waits)
        self._turn = WriterTurn(path)
        self._writer = GroupWriter(self._writer_conn, max_hold, _unavailable, self._turn)
        self._here: LoopWriter | None = None
        if writes_on_loop:
            runner = GroupRunner(self._loop_writer_conn, max_hold, _unavailable)
            self._here = LoopWriter(runner, WriterTurn(path), self._to_thread)
        self._readers = _ReaderPool(readers, self._run_read)
        self._checkpointer = Checkpointer(self._engine.raw_connection, checkpoint_seconds)
        self._local = threading.local()
        self._reader_conns: list[Connection] = []
        self._reader_lock = threading.Lock()
        self._peek_conn: Connection | None = None
        self._peek_uow: PeekUnitOfWork | None = None

    @classmethod
    def open(cls, url: str, max_hold: timedelta, waits: Waits = DEFAULT_WAITS) -> SqliteStore:
        """Open (creating and migrating when needed) the database of ``url``.

        ``waits`` bounds each wait: in line for a thread, and for the file's
        lock (another process writing).
        """
        store = cls(sqlite_path(url), max_hold, waits=waits)
        store.migrate()
        return store

    def migrate(self) -> None:
        with self._engine.connect() as conn:
            # Another process may be migrating the same file: wait for it
            # (10 min at most), not the lock timeout meant for requests.
            conn.exec_driver_sql("PRAGMA busy_timeout=600000")
            upgrade(conn)
            conn.commit()

    def _writer_conn(self) -> Connection:
        conn = self._engine.connect()
        # A call's savepoint journals the first change of each page it touches
        # (a create, some 35 pages): sqlite3 keeps that sub-journal in memory
        # only up to 64 KiB, then spills it to a temporary file, a write() for
        # every page and every page number. In memory, it costs no system call.
        conn.exec_driver_sql("PRAGMA temp_store=MEMORY")
        return conn

    def _loop_writer_conn(self) -> Connection:
        conn = self._writer_conn()
        conn.exec_driver_sql("PRAGMA busy_timeout=0")  # the loop waits for no lock
        return conn

    def _reader_conn(self) -> Connection:
        conn: Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._engine.connect()
            self._local.conn = conn
            with self._reader_lock:
                self._reader_conns.append(conn)
        return conn

    def _run_read(self, fn: Callable[[UnitOfWork], T]) -> T:
        return _translated(fn, SqlUnitOfWork(self._reader_conn(), self._max_hold, begin="BEGIN"))

    def checkpoint(self) -> None:
        """Copy the WAL into the database file now (what the checkpoint thread does)."""
        self._checkpointer.run_now()

    def writer_stats(self) -> WriterStats:
        """Groups of two calls or more, and their calls, wherever they ran."""
        runners = [self._writer.runner] + ([] if self._here is None else [self._here.runner])
        return WriterStats(sum(r.groups for r in runners), sum(r.grouped_calls for r in runners))

    def run_write_sync(self, fn: Callable[[UnitOfWork], T]) -> T:
        """Run ``fn`` as a write transaction from synchronous code (CLI, tests)."""
        return self._writer.submit_future(fn).result()

    async def write(self, fn: Callable[[UnitOfWork], T]) -> T:
        loop = asyncio.get_running_loop()
        if self._here is not None and self._here.serves(loop):
            future: asyncio.Future[T] = loop.create_future()
            self._here.submit(Call(fn, _not_in_line, LoopSettle(loop, future)))
            return await future
        job, future, settle = self._call()
        self._writer.submit(fn, job.start, settle)
        return await self._queued(future, job)

    def _to_thread(self, call: Call[Any]) -> None:
        """A call the loop's thread could not run, to the writer thread, in line
        there as any other: refused if no thread took it in time."""
        settle = call.settle
        assert isinstance(settle, LoopSettle)
        job = _Job()
        call.start = job.start
        self._writer.submit_call(call)
        timer = self._expire(settle.loop, settle.future, job)
        settle.future.add_done_callback(lambda _: timer.cancel())

    async def read(self, fn: Callable[[UnitOfWork], T]) -> T:
        job, future, settle = self._call()
        self._readers.submit(fn, job, settle)
        return await self._queued(future, job)

    async def peek(self, fn: Callable[[UnitOfWork], T], *, alone: bool = False) -> T:
        """Run a read of a few point lookups at once, on the caller's own thread.

        A replay's lookup (its record, its hold) takes some 20 us of SQLite; the hop
        to a reader thread and back cost more than that (a queue, two thread
        wake-ups, the GIL handed over twice). A reader in WAL mode waits for no
        writer, so this blocks the event loop for the lookups alone. It never
        waits for a lock: its connection has no busy timeout, and a read refused
        busy (a WAL being recovered after a crash) goes to a reader thread instead.
        Only for reads bounded by their keys: anything that scans goes to read().
        ``alone``: the read is one statement, run outside a transaction
        (adapters/store/sqlite/peeks.py; run again in one if it is not).
        """
        uow = self._peek_uow
        if uow is None:
            conn = self._peek_conn = self._engine.connect()
            conn.exec_driver_sql("PRAGMA busy_timeout=0")
            # One unit of work for every peek: they run one after another on one
            # thread, each whole (nothing awaited), and its repositories are then
            # made once, not a score of objects a call.
            uow = self._peek_uow = PeekUnitOfWork(conn, self._max_hold)
        try:
            return uow.run_alone(fn) if alone else fn(uow)
        except (OperationalError, sqlite3.OperationalError):
            return await self.read(fn)

    @staticmethod
    def _call() -> tuple[_Job, asyncio.Future[Any], Settle]:
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        return _Job(), future, LoopSettle(loop, future)

    async def _queued(self, future: asyncio.Future[T], job: _Job) -> T:
        """The answer of ``future``; refused (503) if no thread took it in time.

        A call still in line after the store timeout is abandoned: its thread
        will skip it, so nothing of it runs. One already started runs to its
        end (SQLite's own busy timeout bounds its lock waits).
        """

        timer = self._expire(asyncio.get_running_loop(), future, job)
        try:
            return await future
        finally:
            timer.cancel()

    def _expire(
        self, loop: asyncio.AbstractEventLoop, future: asyncio.Future[Any], job: _Job
    ) -> asyncio.TimerHandle:
        """Refuse ``future``'s call (503) unless a thread started it within the store timeout."""

        def expire() -> None:
            if not future.done() and job.abandon():
                future.set_exception(_busy())

        return loop.call_later(self._queue_seconds, expire)

    async def close(self) -> None:
        if self._here is not None:
            self._here.close()
        self._checkpointer.close()
        self._writer.close()
        self._turn.close()
        self._readers.close()
        for conn in self._reader_conns:
            conn.close()
        if self._peek_conn is not None:
            self._peek_conn.close()
        self._engine.dispose()


def _not_in_line() -> None:
    """A call run on the loop's thread never waits in a line it could be refused from."""
