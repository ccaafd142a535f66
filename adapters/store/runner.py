"""Runs the repositories' prebuilt statements straight on the driver's cursor.

SQLAlchemy's ``Connection.execute`` costs some 45 µs a statement here (cache
key, execution context, result wrapping) against some 5 µs for sqlite3's own.
A hold create runs about fifteen statements on SQLite's one writer thread, so
that overhead was most of the time a write held it; on PostgreSQL it was half
of a create's CPU in the server process. So each prebuilt Core statement is
compiled once (per dialect and shape of its parameters) and run on the
driver's cursor: sqlite3's, or on PostgreSQL a cursor straight on asyncpg
(adapters/store/postgres/cursor.py), awaited from the store's greenlet as
SQLAlchemy's own asyncpg adapter does. Driver errors are raised as SQLAlchemy raises them
(``DBAPIError.instance``), and a connection the dialect judges lost is
invalidated, as SQLAlchemy does. Transactions stay SQLAlchemy's: the unit of
work begins and commits them through its Connection.

Only statements built once, at import, may be run through ``rows``/``first``/
``scalars``/``write``: their compiled SQL is cached by identity
(adapters/store/plans.py). A statement built per call goes through
``dynamic`` (SQLAlchemy's own execute).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, cast

from sqlalchemy import Connection, Executable
from sqlalchemy.exc import DBAPIError

from slotward.adapters.store.plans import ASYNCPG, SQLITE, Plan, combined, plan_of
from slotward.adapters.store.postgres.cursor import AsyncpgCursor

__all__ = ["CoreRunner", "DriverRunner", "Row", "Runner", "runner_for"]

Params = Mapping[str, Any]


class Row(Protocol):
    """A result row read by column name (sqlite3.Row, SQLAlchemy's RowMapping)."""

    def __getitem__(self, key: str, /) -> Any: ...


class Runner(Protocol):
    @property
    def conn(self) -> Connection: ...

    def rows(self, stmt: Executable, params: Params | None = None) -> list[Row]: ...

    def first(self, stmt: Executable, params: Params | None = None) -> Row | None: ...

    def scalars(self, stmt: Executable, params: Params | None = None) -> list[Any]: ...

    def write(self, stmt: Executable, params: Params | Sequence[Params]) -> int: ...

    def put(self, stmt: Executable, params: Params | Sequence[Params]) -> None: ...

    def flush(self) -> None: ...

    def dynamic(self, stmt: Executable) -> list[Row]: ...

    def sql(self, statement: str) -> None: ...


def runner_for(conn: Connection) -> Runner:
    if conn.dialect.name == "sqlite" or conn.dialect.driver == "asyncpg":
        return DriverRunner(conn)
    return CoreRunner(conn)


class CoreRunner:
    """Every statement through SQLAlchemy (a driver DriverRunner does not know)."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn

    def rows(self, stmt: Executable, params: Params | None = None) -> list[Row]:
        return [r._mapping for r in self.conn.execute(stmt, params)]

    def first(self, stmt: Executable, params: Params | None = None) -> Row | None:
        row = self.conn.execute(stmt, params).first()
        return None if row is None else row._mapping

    def scalars(self, stmt: Executable, params: Params | None = None) -> list[Any]:
        return list(self.conn.execute(stmt, params).scalars())

    def write(self, stmt: Executable, params: Params | Sequence[Params]) -> int:
        result: Any = self.conn.execute(stmt, params)
        return int(result.rowcount)

    def put(self, stmt: Executable, params: Params | Sequence[Params]) -> None:
        self.write(stmt, params)

    def flush(self) -> None:
        pass

    def dynamic(self, stmt: Executable) -> list[Row]:
        return self.rows(stmt)

    def sql(self, statement: str) -> None:
        self.conn.exec_driver_sql(statement)


class DriverRunner:
    """Prebuilt statements on the driver's cursor; ``dynamic`` ones through SQLAlchemy."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self._dialect = SQLITE if conn.dialect.name == "sqlite" else ASYNCPG
        raw: Any = conn.connection.dbapi_connection
        self._raw = raw
        if self._dialect is SQLITE:
            self._cursor: Any = raw.cursor()
            self._cursor.row_factory = sqlite3.Row  # rows read by name
        else:  # asyncpg's Record is read by name as it is
            self._cursor = AsyncpgCursor(raw)
        self._errors: type[Exception] = conn.dialect.loaded_dbapi.Error
        # PostgreSQL: writes put aside until the next statement or the commit,
        # then sent together as one (``flush``).
        self._defer = self._dialect is ASYNCPG
        self._pending: list[tuple[Plan, dict[str, Any]]] = []

    def _args(self, plan: Plan, params: Params) -> Any:
        # Both by position: sqlite3 a tuple, asyncpg a list (empty if none).
        args = plan.args(params)
        return args if self._dialect is SQLITE else list(args)

    def _run(self, stmt: Executable, params: Params | None) -> Any:
        if self._pending:
            self.flush()
        plan = plan_of(stmt, params or {}, self._dialect)
        args = self._args(plan, params or {})
        try:
            self._cursor.execute(plan.sql, args)
        except self._errors as exc:
            raise self._translated(exc, plan.sql, args) from exc
        return self._cursor

    def rows(self, stmt: Executable, params: Params | None = None) -> list[Row]:
        return list(self._run(stmt, params).fetchall())

    def first(self, stmt: Executable, params: Params | None = None) -> Row | None:
        row: Row | None = self._run(stmt, params).fetchone()
        return row

    def scalars(self, stmt: Executable, params: Params | None = None) -> list[Any]:
        return [r[0] for r in self._run(stmt, params).fetchall()]

    def write(self, stmt: Executable, params: Params | Sequence[Params]) -> int:
        """The rows changed; of several parameter sets, -1 on PostgreSQL (asyncpg's
        executemany does not count them)."""
        if isinstance(params, Mapping):
            return int(self._run(stmt, params).rowcount)
        if not params:
            return 0
        if self._pending:
            self.flush()
        return self._many(plan_of(stmt, params[0], self._dialect), params)

    def _many(self, plan: Plan, params: Sequence[Params]) -> int:
        args = [self._args(plan, p) for p in params]
        try:
            self._cursor.executemany(plan.sql, args)
        except self._errors as exc:
            raise self._translated(exc, plan.sql, args) from exc
        return int(self._cursor.rowcount)

    def put(self, stmt: Executable, params: Params | Sequence[Params]) -> None:
        """A write whose row count nobody needs: on PostgreSQL sent with the next ones.

        It goes out before the next statement of any kind, or at ``flush`` (the
        unit of work flushes before it commits), so every read still sees it.
        Writes sent together are data-modifying CTEs of one statement, which
        all see the state before it: so a write to a table that a pending
        write changes (other than both inserting) is sent after those, never
        with them (an UPDATE would not see a row inserted beside it, and two
        updates of one row in one statement are undefined).
        """
        if not isinstance(params, Mapping) and len(params) == 1:
            params = params[0]
        if not self._defer:
            if isinstance(params, Mapping):
                self._run(stmt, params)  # write's own way, a call less
            else:
                self.write(stmt, params)
            return
        if not isinstance(params, Mapping) and not params:
            return
        first = params if isinstance(params, Mapping) else params[0]
        plan = plan_of(stmt, first, self._dialect)
        if any(
            other.table == plan.table and not other.kind == plan.kind == "insert"
            for other, _ in self._pending
        ):
            self.flush()
        if isinstance(params, Mapping):
            self._pending.append((plan, plan.bind(params)))
        else:
            # Several rows go now, by executemany, ahead of the pending writes
            # of other tables (no constraint, trigger or foreign key spans two
            # tables, so their order does not matter): a CTE per row would make
            # the batch differ with the row count, and asyncpg would prepare it
            # again and again (its cache holds 100).
            self._many(plan, params)

    def flush(self) -> None:
        """Send the writes put aside, as one statement."""
        pending, self._pending = self._pending, []
        if not pending:
            return
        if len(pending) == 1:
            plan, bound = pending[0]
            sql, args = plan.sql, [bound[name] for name in plan.order]
        else:
            sql, order = combined([plan for plan, _ in pending])
            named = {
                f"w{k}_{n}": v for k, (_, bound) in enumerate(pending) for n, v in bound.items()
            }
            args = [named[name] for name in order]
        try:
            self._cursor.execute(sql, args)
        except self._errors as exc:
            raise self._translated(exc, sql, args) from exc

    def dynamic(self, stmt: Executable) -> list[Row]:
        if self._pending:
            self.flush()
        return [r._mapping for r in self.conn.execute(stmt)]

    def sql(self, statement: str) -> None:
        """Run one constant statement without parameters (a SAVEPOINT, say)."""
        if self._pending:
            self.flush()
        try:
            self._cursor.execute(statement)
        except self._errors as exc:
            raise self._translated(exc, statement, None) from exc

    def _translated(self, exc: Exception, sql: str, params: Any) -> DBAPIError:
        """The driver's error as SQLAlchemy raises it (OperationalError, IntegrityError...).

        A connection the dialect judges lost is invalidated, as SQLAlchemy does,
        so the pool replaces it.
        """
        dialect = self.conn.dialect
        lost = dialect.is_disconnect(cast(Any, exc), self._raw, self._cursor)
        error = DBAPIError.instance(
            sql, params, exc, self._errors, hide_parameters=True,
            connection_invalidated=lost, dialect=dialect,
        )  # fmt: skip
        assert isinstance(error, DBAPIError)  # what instance() makes of a driver error
        if lost:
            self.conn.invalidate(error)
        return error
