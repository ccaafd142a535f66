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
``scalars``/``write``: their compiled SQL is cached by identity. A statement
built per call goes through ``dynamic`` (SQLAlchemy's own execute).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any, Protocol, cast

from sqlalchemy import ClauseElement, Connection, Dialect, Executable
from sqlalchemy.dialects import sqlite
from sqlalchemy.dialects.postgresql import asyncpg
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql.compiler import Compiled

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


# sqlite3 binds named parameters (":tenant") from a dict as they are. asyncpg
# takes $1, $2...: its statements are compiled in pyformat ("%(tenant)s"), where
# SQLAlchemy doubles every literal "%", so Python's own %-formatting can number
# the parameters (``_Numbers``) and undo the doubling, with no SQL parsed here.
# (SQLAlchemy's own "numeric_dollar" numbers them too, but not the elements of
# an expanding parameter without its values, and not across the statements
# ``_combined`` joins.)
_SQLITE = sqlite.dialect(paramstyle="named")
_ASYNCPG: Dialect = asyncpg.dialect(paramstyle="pyformat")  # type: ignore[no-untyped-call]
_POSTCOMPILE = "__[POSTCOMPILE_{}]"


class _Plan:
    """One statement compiled for one dialect and shape of parameters."""

    __slots__ = ("expanding", "fixed", "kind", "named", "order", "plain", "sizes", "sql", "table")

    def __init__(
        self, stmt: Executable, names: Sequence[str], lengths: Sequence[int], dialect: Dialect
    ) -> None:
        clause = cast(ClauseElement, stmt)
        compiled: Compiled = clause.compile(dialect=dialect, column_keys=list(names))
        if getattr(compiled, "insert_prefetch", None) or getattr(compiled, "update_prefetch", None):
            # A Python-side default or onupdate would be bound as NULL here.
            raise ValueError(f"a column default computed in Python is not supported: {stmt}")
        sql = str(compiled)
        mark = "%({})s" if dialect is _ASYNCPG else ":{}"
        given = set(names)
        self.fixed: dict[str, Any] = {}
        self.expanding: tuple[str, ...] = ()
        self.sizes: tuple[int, ...] = ()  # each expanding parameter's placeholders
        lists = dict(zip((n for n in names), lengths, strict=True))
        for name, bind in compiled.binds.items():  # type: ignore[attr-defined]
            if bind.expanding:
                value = None if name in given else bind.effective_value
                n = lists.get(name, -1) if value is None else len(value)
                if n <= 0:
                    raise ValueError(f"expanding parameter {name!r} needs a non-empty list")
                marks = ", ".join(mark.format(f"{name}__{i}") for i in range(n))
                sql = sql.replace(_POSTCOMPILE.format(name), marks)
                if value is None:
                    self.expanding += (name,)
                    self.sizes += (n,)
                else:
                    self.fixed.update({f"{name}__{i}": v for i, v in enumerate(value)})
            elif name not in given:
                self.fixed[name] = bind.effective_value
        if "__[POSTCOMPILE_" in sql:
            raise ValueError(f"unexpanded parameter in {sql!r}")
        self.named = sql
        table = getattr(stmt, "table", None)
        self.table: str | None = getattr(table, "name", None)
        self.kind = type(stmt).__name__.lower()  # insert, update, delete, select...
        self.order: tuple[str, ...] = ()
        if dialect is _ASYNCPG:  # positional: $n in order of first use
            sql, self.order = _numbered(sql)
        self.sql = sql
        self.plain = not self.fixed and not self.expanding  # sqlite3 binds such params as given

    def bind(self, params: Params) -> dict[str, Any]:
        bound = {**self.fixed, **params}
        for name, size in zip(self.expanding, self.sizes, strict=True):
            values = bound.pop(name)
            if not 0 < len(values) <= size:
                raise ValueError(f"{len(values)} values for the {size} places of {name!r}")
            for i, value in enumerate(values):
                bound[f"{name}__{i}"] = value
            for i in range(len(values), size):  # the places past the list: its last again
                bound[f"{name}__{i}"] = values[-1]
        return bound


def _places(n: int) -> int:
    """How many placeholders a list of ``n`` values is sent in: the next power of two.

    Every expanding parameter is an ``IN`` list (runner statements use them
    for nothing else), where a value given twice changes nothing; so a list is
    padded with its last value. A statement then has a handful of shapes, not
    one per length: each shape is compiled once by SQLAlchemy (some
    milliseconds) and stays in sqlite3's statement cache (128 entries) and
    asyncpg's, where a list of every length from 1 to 500 (the relay's
    batches) was a new statement to compile and prepare.
    """
    return 1 << (n - 1).bit_length() if n > 0 else n


class _Numbers:
    """$1, $2... for the parameters of pyformat SQL, in the order ``%`` asks for them.

    ``sql % numbers`` numbers ``sql``; the name of each number, ``prefix`` then
    the parameter's, is in ``order``.
    """

    def __init__(self) -> None:
        self.prefix = ""
        self.order: list[str] = []
        self._given: dict[str, str] = {}

    def __getitem__(self, name: str) -> str:
        key = self.prefix + name
        if key not in self._given:
            self.order.append(key)
            self._given[key] = f"${len(self.order)}"
        return self._given[key]


def _numbered(sql: str) -> tuple[str, tuple[str, ...]]:
    """Pyformat ``sql`` with $1, $2... for its parameters, and their names in order."""
    numbers = _Numbers()
    return sql % numbers, tuple(numbers.order)


_COMBINED: dict[tuple[int, ...], tuple[tuple[_Plan, ...], str, tuple[str, ...]]] = {}


def _combined(plans: Sequence[_Plan]) -> tuple[str, tuple[str, ...]]:
    """One statement running ``plans`` as data-modifying CTEs: ``WITH w0 AS (...) SELECT 1``.

    The parameters of the k-th are renamed ``wk_<name>``. Cached by the plans'
    identities, checked as ``_plan`` checks statements'.
    """
    key = tuple(id(plan) for plan in plans)
    found = _COMBINED.get(key)
    if found is None or any(a is not b for a, b in zip(found[0], plans, strict=True)):
        numbers = _Numbers()
        parts = []
        for k, plan in enumerate(plans):
            numbers.prefix = f"w{k}_"
            parts.append(f"w{k} AS ({plan.named % numbers})")
        sql = "WITH " + ", ".join(parts) + " SELECT 1"
        # The plans are kept with it: their ids stay theirs while it is cached.
        found = (tuple(plans), sql, tuple(numbers.order))
        _COMBINED[key] = found
    return found[1], found[2]


_PLANS: dict[tuple[int, str, tuple[str, ...], tuple[int, ...]], tuple[Executable, _Plan]] = {}


# The plans whose SQL does not depend on their lists' lengths (no expanding
# parameter), by statement and parameter names alone: most statements, found
# without measuring every value of every call (some 4% of a create's writer
# instructions, by cachegrind).
_FLAT: dict[tuple[int, str, tuple[str, ...]], tuple[Executable, _Plan]] = {}


def _plan(stmt: Executable, params: Params, dialect: Dialect = _SQLITE) -> _Plan:
    names = tuple(params)
    flat = _FLAT.get((id(stmt), dialect.name, names))
    if flat is not None and flat[0] is stmt:
        return flat[1]
    lengths = tuple(_places(len(v)) if isinstance(v, list) else -1 for v in params.values())
    key = (id(stmt), dialect.name, names, lengths)
    found = _PLANS.get(key)
    if found is None or found[0] is not stmt:
        # Keeps stmt alive with its plan, so its id stays its own.
        found = (stmt, _Plan(stmt, names, lengths, dialect))
        _PLANS[key] = found
        if not found[1].expanding:
            _FLAT[(id(stmt), dialect.name, names)] = found
    return found[1]


class DriverRunner:
    """Prebuilt statements on the driver's cursor; ``dynamic`` ones through SQLAlchemy."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self._dialect = _SQLITE if conn.dialect.name == "sqlite" else _ASYNCPG
        raw: Any = conn.connection.dbapi_connection
        self._raw = raw
        if self._dialect is _SQLITE:
            self._cursor: Any = raw.cursor()
            self._cursor.row_factory = sqlite3.Row  # rows read by name
        else:  # asyncpg's Record is read by name as it is
            self._cursor = AsyncpgCursor(raw)
        self._errors: type[Exception] = conn.dialect.loaded_dbapi.Error
        # PostgreSQL: writes put aside until the next statement or the commit,
        # then sent together as one (``flush``).
        self._defer = self._dialect is _ASYNCPG
        self._pending: list[tuple[_Plan, dict[str, Any]]] = []

    def _args(self, plan: _Plan, params: Params) -> Any:
        if plan.plain and self._dialect is _SQLITE:
            return params  # bound now, not kept: no copy needed
        bound = plan.bind(params)
        # sqlite3 binds by name; asyncpg by position (a list, empty if none).
        return bound if self._dialect is _SQLITE else [bound[name] for name in plan.order]

    def _run(self, stmt: Executable, params: Params | None) -> Any:
        if self._pending:
            self.flush()
        plan = _plan(stmt, params or {}, self._dialect)
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
        return self._many(_plan(stmt, params[0], self._dialect), params)

    def _many(self, plan: _Plan, params: Sequence[Params]) -> int:
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
        plan = _plan(stmt, first, self._dialect)
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
            sql, order = _combined([plan for plan, _ in pending])
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
