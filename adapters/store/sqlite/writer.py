"""SQLite's writer thread: write calls that cannot run on the event loop's thread.

A write call runs on the event loop's own thread when it can
(sqlite/loop_writer.py). It comes here, to one thread that owns a connection
of its own, when the file's lock is not free at once (another process's turn,
say: waiting for it must not stop the loop) or when its caller is not that
loop (synchronous code: the CLI, tests). The calls that queued up while one
transaction ran are run next as one group (sqlite/groups.py): every call runs
whole on this thread, in order, and is answered only after its group's COMMIT.

Anything that fails outside a call (the connection cannot be opened, say)
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
from typing import Any, TypeVar

from sqlalchemy import Connection

from slotward.adapters.store.repos import SqlUnitOfWork
from slotward.adapters.store.sqlite.groups import (
    MAX_GROUP,
    Call,
    GroupRunner,
    LoopSettle,
    Settle,
    deliver,
    settle_on_loop,
    unavailable,
)

__all__ = ["GroupWriter", "settle_future"]

T = TypeVar("T")

log = logging.getLogger("slotward.store")


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
        self._turn: AbstractContextManager[Any] = turn if turn is not None else nullcontext()
        self.runner = GroupRunner(connect, max_hold, translate)
        self._calls: queue.SimpleQueue[Call[Any] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name="slotward-writer", daemon=True)
        self._thread.start()

    def submit(
        self, run: Callable[[SqlUnitOfWork], T], start: Callable[[], None], settle: Settle
    ) -> None:
        """Queue ``run``; ``settle`` gets its outcome, on this thread, after its commit."""
        self._calls.put(Call(run, start, settle))

    def submit_call(self, call: Call[Any]) -> None:
        """Queue a call made elsewhere (one the event loop's thread could not run)."""
        self._calls.put(call)

    def submit_future(self, run: Callable[[SqlUnitOfWork], T]) -> Future[T]:
        """Queue ``run``; a future of its answer (for synchronous callers)."""
        future: Future[T] = Future()
        self.submit(run, lambda: None, functools.partial(settle_future, future))
        return future

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
                    self.runner.drop_connection()
                    for call in started:
                        if not call.delivered:
                            call.outcome = (False, unavailable())
                            deliver(call)
        finally:
            self.runner.drop_connection()

    def _run_group(self, group: list[Call[Any]]) -> None:
        if not group:
            return
        # Held over the transaction, given back before the answers are: another
        # process sharing the file writes while this one hands them over.
        with self._turn:
            self.runner.run(group)
        _deliver_group(group)


def _started(call: Call[Any]) -> bool:
    try:
        call.start()
    except BaseException as exc:
        call.outcome = (False, exc)
        deliver(call)
        return False
    return True


def _settle_all(answers: list[tuple[asyncio.Future[Any], bool, Any]]) -> None:
    for future, ok, value in answers:
        settle_on_loop(future, ok, value)


def _deliver_group(group: list[Call[Any]]) -> None:
    """Hand back a group's answers: one callback per event loop."""
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], bool, Any]]] = {}
    for call in group:
        settle = call.settle
        if not isinstance(settle, LoopSettle):
            deliver(call)
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
