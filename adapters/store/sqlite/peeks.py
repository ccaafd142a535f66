"""The unit of work of a peek: a read run on the event loop's own thread.

A peek's read is a few point lookups (SqliteStore.peek). It runs in a read
transaction begun and ended on the driver's own connection: through
SQLAlchemy's Connection a BEGIN and its ROLLBACK cost some 35 us, more than
the lookups; sqlite3 runs each in 2. The repositories run on the driver's
cursor already (runner.py), so SQLAlchemy need not know of the transaction.

A read of one statement needs no transaction at all: SQLite runs a statement
outside one in a transaction of its own, so it reads one snapshot, as the
same statement would inside BEGIN ... ROLLBACK. Two statements fewer is some
10 us of a known replay in the server (docs/performance.md, tenth pass). So
:meth:`PeekUnitOfWork.run_alone` runs a read its caller says is one
statement without them; should the read run a second statement after all,
that statement is refused and the read is run again whole, in a transaction.
The caller's word is a shortcut, never a condition of a consistent read.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

from sqlalchemy import Connection, Executable

from slotward.adapters.store.repos import SqlUnitOfWork
from slotward.adapters.store.runner import DriverRunner, Params, Row
from slotward.engine.ports import UnitOfWork

__all__ = ["PeekUnitOfWork"]

T = TypeVar("T")


class _SecondStatement(Exception):
    """A read run alone reached a second statement: it runs again in a transaction."""


class _PeekRunner(DriverRunner):
    """The driver's runner, which in a read run alone lets one statement through."""

    def __init__(self, conn: Connection) -> None:
        super().__init__(conn)
        self.alone = False  # a read run alone, outside a transaction, is running
        self.ran = False  # its one statement has run
        self.refused = False  # it reached a second one (even if the read caught the error)

    def _refuse(self) -> _SecondStatement:
        self.refused = True
        return _SecondStatement()

    def _run(self, stmt: Executable, params: Params | None) -> Any:
        if self.alone:
            if self.ran:
                raise self._refuse()
            self.ran = True
        return super()._run(stmt, params)

    def first(self, stmt: Executable, params: Params | None = None) -> Row | None:
        if not self.alone:
            return super().first(stmt, params)
        # Read to the end: the statement is then reset, and with it its snapshot
        # (one left open would hold the WAL back from every checkpoint).
        rows = self._run(stmt, params).fetchall()
        return rows[0] if rows else None

    def dynamic(self, stmt: Executable) -> list[Row]:
        if self.alone:  # SQLAlchemy's execute would begin a transaction of its own
            raise self._refuse()
        return super().dynamic(stmt)

    def sql(self, statement: str) -> None:
        if self.alone:
            raise self._refuse()
        super().sql(statement)


class PeekUnitOfWork(SqlUnitOfWork):
    """A read transaction begun and ended on the driver's own connection, or, for
    a read of one statement, none (:meth:`run_alone`). Reads only: a commit is
    not taken (nothing would be written)."""

    def __init__(self, conn: Connection, max_hold: timedelta) -> None:
        runner = _PeekRunner(conn)
        super().__init__(conn, max_hold, begin=None, db=runner)
        driver = conn.connection.driver_connection
        assert isinstance(driver, sqlite3.Connection)
        self._driver = driver
        self._runner = runner

    def run_alone(self, fn: Callable[[UnitOfWork], T]) -> T:
        """``fn``'s read, outside a transaction if it is one statement; else
        run again in one (its first statement then runs twice)."""
        runner = self._runner
        runner.alone, runner.ran, runner.refused = True, False, False
        try:
            found = fn(self)
        except Exception:
            if not runner.refused:  # the read's own error, or the store's (busy)
                raise
        else:
            if not runner.refused:
                return found
        finally:
            runner.alone = False
        # Refused: whatever the read made of that (an answer, another error) is
        # not an answer from one snapshot.
        return fn(self)

    def __enter__(self) -> SqlUnitOfWork:
        self.holds.forget()
        if not self._runner.alone:
            self._driver.execute("BEGIN")
        return self

    def __exit__(self, *_: object) -> None:
        self.holds.forget()
        if not self._runner.alone:
            self._driver.execute("ROLLBACK")

    def commit(self) -> None:
        raise TypeError("a peek only reads")
