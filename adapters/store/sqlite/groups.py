"""A group of SQLite write calls run in one transaction, on whichever thread owns the connection.

The calls that queued up while one transaction ran are run next, in one shared
``BEGIN IMMEDIATE`` transaction, and committed by one ``COMMIT`` (group
commit): a commit is the dearest step of a write here, and waiting calls are
independent claims the tenant order already serializes. The group runs first
without savepoints (each copies every page its call changes, for an undo
almost never needed); if a call leaves work to undo (it raised, or ended,
with rows changed since it last committed) the group is rolled back, nothing
of it answered, and run again with a savepoint per call
(adapters/store/sqlite/savepoint.py).

Each call keeps the meaning it had alone:
- it sees every call before it (they ran before it, in the same transaction);
- its ``uow.commit()`` keeps its work, an exception rolls back what it did
  since (in the second run, back to its savepoint), as alone;
- its answer, or its error, is handed back only once the group's ``COMMIT``
  succeeded, so nothing is acknowledged that a crash could lose; if the
  ``COMMIT`` fails, every call of the group is answered with its error;
- a database error inside a call (locked, disk full, I/O) leaves the shared
  transaction in doubt: the group is rolled back, that call gets the error
  (and loses what it had committed before it, as its answer says it failed),
  and the others run again, each in a transaction of its own.

Two places run groups (adapters/store/sqlite/store.py): the event loop's own
thread (sqlite/loop_writer.py), and the writer thread (sqlite/writer.py) when
the file's lock is not free at once or the caller is not on the loop.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

from slotward.adapters.store.repos import SqlUnitOfWork
from slotward.adapters.store.sqlite.savepoint import SavepointUnitOfWork
from slotward.engine.errors import Unavailable

__all__ = [
    "MAX_GROUP",
    "Call",
    "GroupRunner",
    "LoopSettle",
    "Settle",
    "WriterStats",
    "deliver",
    "settle_on_loop",
    "unavailable",
]

T = TypeVar("T")

log = logging.getLogger("slotward.store")

# More calls than this wait for the next group: a group's calls share its fate
# when its COMMIT fails, and its first answer waits for its last call.
MAX_GROUP = 32


@dataclass(frozen=True)
class WriterStats:
    """How much grouping happened: groups of two calls or more, and their calls."""

    groups: int
    grouped_calls: int


# How a call's answer is handed back: (True, value) or (False, exception).
Settle = Callable[[bool, Any], None]


@dataclass(frozen=True)
class LoopSettle:
    """Hands a thread's outcome to ``future`` on its event loop (one thread-safe callback).

    A committed group's answers bound for one loop go in one callback instead
    (sqlite/writer.py): each callback from a thread writes to the loop's
    wake-up pipe. On the loop's own thread they are settled directly.
    """

    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Any]

    def __call__(self, ok: bool, value: Any) -> None:
        self.loop.call_soon_threadsafe(settle_on_loop, self.future, ok, value)


def settle_on_loop(future: asyncio.Future[Any], ok: bool, value: Any) -> None:
    if future.done():  # refused as too busy, or its caller went away: dropped
        return
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)


@dataclass
class Call(Generic[T]):
    """A write call: ``run`` on a unit of work, its outcome handed to ``settle``."""

    run: Callable[[SqlUnitOfWork], T]
    start: Callable[[], None]  # raises if the caller gave up on the call
    settle: Settle
    outcome: tuple[bool, Any] | None = None  # (ok, value or exception)
    delivered: bool = False


def deliver(call: Call[Any]) -> None:
    """Hand ``call``'s outcome to its ``settle``, once."""
    assert call.outcome is not None
    call.delivered = True
    try:
        call.settle(*call.outcome)
    except Exception:
        log.warning("a store answer could not be handed back", exc_info=True)


def unavailable() -> Unavailable:
    return Unavailable("the store failed; retry shortly", retry_after=1)


def _busy(exc: DBAPIError) -> bool:
    """The file's lock was taken (or a WAL is being recovered): SQLITE_BUSY."""
    code = getattr(exc.orig, "sqlite_errorcode", None)
    return code is not None and code & 0xFF == sqlite3.SQLITE_BUSY


class GroupRunner:
    """Runs groups of calls on one connection of its own, on the caller's thread.

    Used from one thread at a time. Sets each call's ``outcome``; delivering it
    is the caller's.
    """

    def __init__(
        self,
        connect: Callable[[], Connection],
        max_hold: Any,
        translate: Callable[[BaseException], BaseException],
    ) -> None:
        self._connect = connect
        self._max_hold = max_hold
        self._translate = translate
        self._conn: Connection | None = None
        self._uows: tuple[SqlUnitOfWork, SavepointUnitOfWork] | None = None  # the connection's
        self.groups = 0
        self.grouped_calls = 0

    def run(self, group: list[Call[Any]]) -> None:
        """Run ``group``: one call in a transaction of its own, several together."""
        conn = self._connection()
        if len(group) == 1:
            self._run_alone(conn, group[0])
        else:
            self._run_grouped(conn, group)

    def try_run(self, group: list[Call[Any]]) -> bool:
        """Run ``group`` together unless the file's lock is taken: then False,
        and nothing of it ran (its connection waits for no lock)."""
        conn = self._connection()
        uow = self._units(conn)[1]
        began = self._run_together(conn, uow, group, undoable=False, busy_gives_up=True)
        if began is None:
            return False
        self._count(group)
        if not began:
            self._run_together(conn, uow, group, undoable=True)
        return True

    def drop_connection(self) -> None:
        self._uows = None
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()  # rolls back what was not committed
            except Exception:
                log.warning("closing a SQLite writer's connection failed", exc_info=True)

    def _connection(self) -> Connection:
        if self._conn is None:
            self._conn = self._connect()
        return self._conn

    def _units(self, conn: Connection) -> tuple[SqlUnitOfWork, SavepointUnitOfWork]:
        """The units of work on ``conn``, alone and in a group: made once, used call after call."""
        if self._uows is None:
            alone = SqlUnitOfWork(conn, self._max_hold, begin="BEGIN IMMEDIATE")
            self._uows = (alone, SavepointUnitOfWork(conn, self._max_hold))
        return self._uows

    def _count(self, group: list[Call[Any]]) -> None:
        if len(group) > 1:
            self.groups += 1
            self.grouped_calls += len(group)

    def _run_grouped(self, conn: Connection, group: list[Call[Any]]) -> None:
        self._count(group)
        uow = self._units(conn)[1]
        if not self._run_together(conn, uow, group, undoable=False):
            self._run_together(conn, uow, group, undoable=True)

    def _run_together(
        self,
        conn: Connection,
        uow: SavepointUnitOfWork,
        group: list[Call[Any]],
        *,
        undoable: bool,
        busy_gives_up: bool = False,
    ) -> bool | None:
        """Run ``group`` in one transaction, each call in a savepoint if ``undoable``.

        False if a call left work to undo and had no savepoint to undo it: the
        group is rolled back, nothing answered, to be run again with them.
        None if ``busy_gives_up`` and the transaction could not begin at once.
        """
        uow.undoable = undoable
        try:
            uow.begin_group()
        except DBAPIError as exc:
            if busy_gives_up and _busy(exc):
                return None
            self._failed(group, exc)
            return True
        for i, call in enumerate(group):
            uow.spoiled = False
            try:
                call.outcome = (True, call.run(uow))
            except DBAPIError as exc:
                # The shared transaction is in doubt: undo it all; this call
                # failed as it would have alone; the others run again alone.
                _rollback(conn)
                call.outcome = (False, self._translate(exc))
                for other in group[:i] + group[i + 1 :]:
                    self._run_alone(conn, other)
                return True
            except BaseException as exc:
                call.outcome = (False, exc)
            if uow.spoiled:
                _rollback(conn)
                for undone in group[: i + 1]:
                    undone.outcome = None
                return False
        try:
            uow.commit_group()
        except DBAPIError as exc:
            _rollback(conn)
            self._failed(group, exc)
        return True

    def _failed(self, group: list[Call[Any]], exc: DBAPIError) -> None:
        """Every call of a group that did not commit fails with the error."""
        for call in group:
            call.outcome = (False, self._translate(exc))

    def _run_alone(self, conn: Connection, call: Call[Any]) -> None:
        uow = self._units(conn)[0]
        try:
            call.outcome = (True, call.run(uow))
        except DBAPIError as exc:
            call.outcome = (False, self._translate(exc))
        except BaseException as exc:
            call.outcome = (False, exc)


def _rollback(conn: Connection) -> None:
    # After a failed COMMIT SQLite's transaction is still open while SQLAlchemy
    # holds its own as over: clear SQLAlchemy's, then the driver's.
    conn.rollback()
    raw: Any = conn.connection.dbapi_connection
    raw.rollback()
