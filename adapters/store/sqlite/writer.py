"""SQLite's one writer thread, committing the write calls waiting for it together.

Every write call runs whole on this thread, in order. The calls that queued
up while one transaction ran are run next, in one shared ``BEGIN IMMEDIATE``
transaction, and committed by one ``COMMIT`` (group commit): a commit is the
dearest step of a write here, and waiting calls are independent claims the
tenant order already serializes. The group runs first without savepoints
(each copies every page its call changes, for an undo almost never needed);
if a call leaves work to undo (it raised, or ended, with rows changed since
it last committed) the group is rolled back, nothing of it answered, and run
again with a savepoint per call (adapters/store/sqlite/savepoint.py).

Each call keeps the meaning it had alone:
- it sees every call before it (they ran before it, in the same transaction);
- its ``uow.commit()`` keeps its work, an exception rolls back what it did
  since (in the second run, back to its savepoint), as alone;
- its answer, or its error, is handed back only once the group's ``COMMIT``
  succeeded, so nothing is acknowledged that a crash could lose; if the
  ``COMMIT`` fails, every call of the group is answered ``Unavailable``;
- a database error inside a call (locked, disk full, I/O) leaves the shared
  transaction in doubt: the group is rolled back, that call gets the error
  (and loses what it had committed before it, as its answer says it failed),
  and the others run again, each in a transaction of its own;
- anything that fails outside a call (the connection cannot be opened, say)
  answers that group's calls ``Unavailable`` and drops the connection; the
  thread goes on with the next group, so no call waits for an answer forever.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from sqlalchemy import Connection
from sqlalchemy.exc import DBAPIError

from slotward.adapters.store.repos import SqlUnitOfWork
from slotward.adapters.store.sqlite.savepoint import SavepointUnitOfWork
from slotward.engine.errors import Unavailable

__all__ = [
    "GroupWriter",
    "LoopSettle",
    "SavepointUnitOfWork",
    "Settle",
    "WriterStats",
    "settle_future",
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
    (:func:`_deliver_group`): each callback from a thread writes to the loop's
    wake-up pipe.
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


def _settle_all(answers: list[tuple[asyncio.Future[Any], bool, Any]]) -> None:
    for future, ok, value in answers:
        settle_on_loop(future, ok, value)


@dataclass
class _Call(Generic[T]):
    run: Callable[[SqlUnitOfWork], T]
    start: Callable[[], None]  # raises if the caller gave up on the call
    settle: Settle
    outcome: tuple[bool, Any] | None = None  # (ok, value or exception)
    delivered: bool = False


class GroupWriter:
    """The writer thread: ``submit`` a call, get a future of its answer."""

    def __init__(
        self,
        connect: Callable[[], Connection],
        max_hold: Any,
        translate: Callable[[BaseException], BaseException],
        turn: AbstractContextManager[Any] | None = None,
    ) -> None:
        """``turn`` is held over each transaction: the processes sharing the
        file take their turns by it (sqlite/turns.py)."""
        self._connect = connect
        self._turn: AbstractContextManager[Any] = turn if turn is not None else nullcontext()
        self._max_hold = max_hold
        self._translate = translate
        self._conn: Connection | None = None
        self._uows: tuple[SqlUnitOfWork, SavepointUnitOfWork] | None = None  # the connection's
        self._calls: queue.SimpleQueue[_Call[Any] | None] = queue.SimpleQueue()
        self._groups = 0
        self._grouped_calls = 0
        self._thread = threading.Thread(target=self._loop, name="slotward-writer", daemon=True)
        self._thread.start()

    def submit(
        self, run: Callable[[SqlUnitOfWork], T], start: Callable[[], None], settle: Settle
    ) -> None:
        """Queue ``run``; ``settle`` gets its outcome, on this thread, after its commit."""
        self._calls.put(_Call(run, start, settle))

    def submit_future(self, run: Callable[[SqlUnitOfWork], T]) -> Future[T]:
        """Queue ``run``; a future of its answer (for synchronous callers)."""
        future: Future[T] = Future()
        self.submit(run, lambda: None, functools.partial(settle_future, future))
        return future

    def stats(self) -> WriterStats:
        return WriterStats(self._groups, self._grouped_calls)

    def close(self) -> None:
        self._calls.put(None)
        self._thread.join()

    def _loop(self) -> None:
        try:
            while True:
                first = self._calls.get()
                if first is None:
                    return
                group = [first]
                while len(group) < MAX_GROUP:
                    try:
                        more = self._calls.get_nowait()
                    except queue.Empty:
                        break
                    if more is None:
                        self._calls.put(None)  # close once this group is done
                        break
                    group.append(more)
                started = [c for c in group if _started(c)]
                try:
                    self._run_group(started)
                except BaseException:
                    log.exception("the SQLite writer failed outside a call; its calls get 503")
                    self._drop_connection()
                    for call in started:
                        if not call.delivered:
                            call.outcome = (False, _unavailable())
                            _deliver(call)
        finally:
            self._drop_connection()

    def _drop_connection(self) -> None:
        self._uows = None
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()  # rolls back what was not committed
            except Exception:
                log.warning("closing the SQLite writer's connection failed", exc_info=True)

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

    def _run_group(self, group: list[_Call[Any]]) -> None:
        if not group:
            return
        conn = self._connection()
        # Held over the transaction, given back before the answers are: another
        # process sharing the file writes while this one hands them over.
        with self._turn:
            if len(group) == 1:
                self._run_alone(conn, group[0])
            else:
                self._run_grouped(conn, group)
        _deliver_group(group)

    def _run_grouped(self, conn: Connection, group: list[_Call[Any]]) -> None:
        self._groups += 1
        self._grouped_calls += len(group)
        uow = self._units(conn)[1]
        if not self._run_together(conn, uow, group, undoable=False):
            self._run_together(conn, uow, group, undoable=True)

    def _run_together(
        self, conn: Connection, uow: SavepointUnitOfWork, group: list[_Call[Any]], *, undoable: bool
    ) -> bool:
        """Run ``group`` in one transaction, each call in a savepoint if ``undoable``.

        False if a call left work to undo and had no savepoint to undo it: the
        group is rolled back, nothing answered, to be run again with them.
        """
        uow.undoable = undoable
        try:
            uow.begin_group()
        except DBAPIError as exc:
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

    def _failed(self, group: list[_Call[Any]], exc: DBAPIError) -> None:
        """Every call of a group that did not commit fails with the error."""
        for call in group:
            call.outcome = (False, self._translate(exc))

    def _run_alone(self, conn: Connection, call: _Call[Any]) -> None:
        uow = self._units(conn)[0]
        try:
            call.outcome = (True, call.run(uow))
        except DBAPIError as exc:
            call.outcome = (False, self._translate(exc))
        except BaseException as exc:
            call.outcome = (False, exc)


def _started(call: _Call[Any]) -> bool:
    try:
        call.start()
    except BaseException as exc:
        call.outcome = (False, exc)
        _deliver(call)
        return False
    return True


def _rollback(conn: Connection) -> None:
    # After a failed COMMIT SQLite's transaction is still open while SQLAlchemy
    # holds its own as over: clear SQLAlchemy's, then the driver's.
    conn.rollback()
    raw: Any = conn.connection.dbapi_connection
    raw.rollback()


def _unavailable() -> Unavailable:
    return Unavailable("the store failed; retry shortly", retry_after=1)


def _deliver(call: _Call[Any]) -> None:
    assert call.outcome is not None
    call.delivered = True
    try:
        call.settle(*call.outcome)
    except Exception:
        log.warning("a store answer could not be handed back", exc_info=True)


def _deliver_group(group: list[_Call[Any]]) -> None:
    """Hand back a group's answers: one callback per event loop."""
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], bool, Any]]] = {}
    for call in group:
        settle = call.settle
        if not isinstance(settle, LoopSettle):
            _deliver(call)
            continue
        assert call.outcome is not None
        call.delivered = True
        by_loop.setdefault(settle.loop, []).append((settle.future, *call.outcome))
    for loop, answers in by_loop.items():
        try:
            loop.call_soon_threadsafe(_settle_all, answers)
        except Exception:  # the loop is closed: nobody waits for these any more
            log.warning("a store answer could not be handed back", exc_info=True)


def settle_future(future: Future[Any], ok: bool, value: Any) -> None:
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)
