"""Write calls run on the event loop's own thread, a turn of the loop's together.

Python runs one thread at a time (the GIL). A writer thread beside the event
loop overlapped only SQLite's own work with the loop's, and paid for that on
every statement: each gives the GIL up and must win it back from a busy loop
(``SELECT 1``: 1.3 us of CPU alone, 4.1 us beside a busy thread, and 139 us
of wall time), and each call crossed threads twice (a queue, a wake-up pipe).
On the loop's thread a write costs its own work (docs/performance.md).

The calls that reach the store in one turn of the loop run as one group
(sqlite/groups.py) in a callback after that turn's others: the tasks of the
requests read in one turn all start in it, so a group is what the writer
thread found queued. The loop stops for the group, as it stopped for the GIL
before; it never waits for a lock: its connection has no busy timeout, and it
takes the file's turn (sqlite/turns.py) only if it is free at once. A group
that finds either taken (another process's turn, a migration) goes whole, in
order, to the writer thread (sqlite/writer.py), which waits for them; and so
do the groups after it until the thread has answered all it was handed, so
calls keep their order and, while processes contend for the file, the loop
does not try for a turn it would mostly not get.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from slotward.adapters.store.sqlite.groups import (
    MAX_GROUP,
    Call,
    GroupRunner,
    LoopSettle,
    deliver,
    settle_on_loop,
    unavailable,
)
from slotward.adapters.store.sqlite.turns import WriterTurn

__all__ = ["LoopWriter"]

log = logging.getLogger("slotward.store")


class LoopWriter:
    """Runs write calls of one event loop on its thread; hands on what it cannot."""

    def __init__(
        self, runner: GroupRunner, turn: WriterTurn, elsewhere: Callable[[Call[Any]], None]
    ) -> None:
        """``runner``'s connection must wait for no lock (``busy_timeout=0``);
        ``elsewhere`` takes, on the loop's thread, each call of a group that
        could not run here (in order)."""
        self.runner = runner
        self._turn = turn
        self._elsewhere = elsewhere
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pending: list[Call[Any]] = []
        self._closed = False
        self._away = 0  # calls handed to the writer thread, not answered yet

    def serves(self, loop: asyncio.AbstractEventLoop) -> bool:
        """Whether ``loop``'s calls run here: the first loop's to write (a loop
        closed since, with nothing left in line, is replaced by the next)."""
        if self._closed:
            return False
        if loop is self._loop:
            return True
        if self._pending:
            return False
        if self._loop is None or self._loop.is_closed():
            self._loop = loop
            return True
        return False

    def submit(self, call: Call[Any]) -> None:
        """Queue ``call`` (its ``settle`` a :class:`LoopSettle` of the served loop)
        for the end of this turn of the loop."""
        assert self._loop is not None
        self._pending.append(call)
        if len(self._pending) == 1:
            self._loop.call_soon(self.flush)

    def flush(self) -> None:
        """Run what is in line now, a group of at most ``MAX_GROUP`` at a time."""
        pending, self._pending = self._pending, []
        for at in range(0, len(pending), MAX_GROUP):
            group = pending[at : at + MAX_GROUP]
            if self._away or not self._ran(group):
                for call in group:
                    self._hand_over(call)

    def _hand_over(self, call: Call[Any]) -> None:
        settle = call.settle
        assert isinstance(settle, LoopSettle)
        self._away += 1
        settle.future.add_done_callback(self._back)
        self._elsewhere(call)

    def _back(self, _: object) -> None:
        self._away -= 1

    def close(self) -> None:
        """Run what is in line, and close the connection (on the loop's thread)."""
        self._closed = True
        self.flush()
        self.runner.drop_connection()
        self._turn.close()

    def _ran(self, group: list[Call[Any]]) -> bool:
        if not self._turn.take_now():
            return False
        try:
            ran = self.runner.try_run(group)
        except Exception:
            log.exception("the SQLite writer failed outside a call; its calls get 503")
            self.runner.drop_connection()
            for call in group:  # none is known committed
                call.outcome = (False, unavailable())
            ran = True
        finally:
            self._turn.__exit__(None, None, None)
        if ran:
            for call in group:
                _settle_here(call)
        return ran


def _settle_here(call: Call[Any]) -> None:
    settle = call.settle
    if isinstance(settle, LoopSettle) and call.outcome is not None:
        call.delivered = True
        settle_on_loop(settle.future, *call.outcome)
    else:
        deliver(call)
