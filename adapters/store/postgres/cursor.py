"""A DBAPI cursor straight on asyncpg, for the runner (adapters/store/runner.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sqlalchemy.util import await_only

__all__ = ["AsyncpgCursor"]


class AsyncpgCursor:
    """The little of a DBAPI cursor the runner uses, straight on asyncpg.

    SQLAlchemy's asyncpg adapter cursor adds some 18 µs a statement to
    asyncpg's own (an asyncio lock, a cache of named statements of its own, a
    regular expression over the status, a deque of the rows), about a tenth of
    a create's CPU in the server process. This one hands the statement to
    asyncpg's LRU statement cache and keeps its rows and count. The adapter
    still owns the connection: it begins the transaction (before the first
    statement, as its own cursor does), commits it, rolls it back, and
    translates asyncpg's errors into the DBAPI errors SQLAlchemy expects.
    """

    __slots__ = ("_adapted", "_conn", "_rows", "rowcount")

    def __init__(self, adapted: Any) -> None:
        self._adapted = adapted
        self._conn: Any = adapted.driver_connection
        self._rows: list[Any] = []
        self.rowcount = -1

    def _begun(self) -> None:
        # The adapter's own transaction (the level the engine was given); its
        # commit and rollback end it. asyncpg alone would run in autocommit.
        adapted = self._adapted
        if adapted._transaction is None:
            await_only(adapted._start_transaction())

    def execute(self, sql: str, args: Sequence[Any] | None = None) -> None:
        self._begun()
        try:
            if args is None:  # a constant statement: the simple protocol
                await_only(self._conn.execute(sql))
                self._rows, self.rowcount = [], -1
                return
            # What asyncpg's own fetch and execute call: the rows and the status.
            rows, status, _ = await_only(
                self._conn._execute(sql, args, 0, None, return_status=True)
            )
        except Exception as exc:
            self._adapted._handle_exception(exc)  # raises the DBAPI error
        self._rows = rows
        self.rowcount = _count(status)

    def executemany(self, sql: str, args: Sequence[Sequence[Any]]) -> None:
        self._begun()
        try:
            await_only(self._conn.executemany(sql, args))
        except Exception as exc:
            self._adapted._handle_exception(exc)
        self._rows, self.rowcount = [], -1

    def fetchall(self) -> list[Any]:
        rows, self._rows = self._rows, []
        return rows

    def fetchone(self) -> Any:
        return self._rows[0] if self._rows else None


def _count(status: bytes | None) -> int:
    """The row count of a command tag (``INSERT 0 1``, ``UPDATE 3``, ``SELECT 2``)."""
    if not status:
        return -1
    last = status.rpartition(b" ")[2]
    return int(last) if last.isdigit() else -1
