"""Prebuilt statements compiled once, per dialect and shape of their parameters.

The driver runner (adapters/store/runner.py) runs a repository's prebuilt Core
statement on the driver's own cursor; this module turns the statement into the
SQL and parameter order the driver takes, once, and keeps it by the
statement's identity (so only statements built once, at import, may come
here), and joins pending PostgreSQL writes into one statement.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping, Sequence
from typing import Any, cast

from sqlalchemy import ClauseElement, Dialect, Executable
from sqlalchemy.dialects import sqlite
from sqlalchemy.dialects.postgresql import asyncpg
from sqlalchemy.sql.compiler import Compiled

__all__ = ["ASYNCPG", "SQLITE", "Plan", "combined", "compiled_shapes", "plan_of"]

Params = Mapping[str, Any]

# Both drivers are given their parameters by position: sqlite3 binds a tuple
# to "?" in half the time it takes to look each name of a dict up (4.7 against
# 2.5 us for an insert of 20 columns, the tuple made by ``operator.itemgetter``
# included), and asyncpg takes $1, $2... Statements are compiled in pyformat
# ("%(tenant)s"), where SQLAlchemy doubles every literal "%", so Python's own
# %-formatting can put each driver's marks in (``_Marks``, ``_Numbers``) and
# undo the doubling, with no SQL parsed here. (SQLAlchemy's own "numeric_dollar"
# numbers them too, but not the elements of an expanding parameter without its
# values, and not across the statements ``combined`` joins.)
SQLITE = sqlite.dialect(paramstyle="pyformat")
ASYNCPG: Dialect = asyncpg.dialect(paramstyle="pyformat")  # type: ignore[no-untyped-call]
_POSTCOMPILE = "__[POSTCOMPILE_{}]"


class Plan:
    """One statement compiled for one dialect and shape of parameters."""

    __slots__ = (
        "_take", "expanding", "fixed", "kind", "named", "order", "places", "plain", "sizes", "sql",
        "table",
    )  # fmt: skip

    def __init__(
        self, stmt: Executable, names: Sequence[str], lengths: Sequence[int], dialect: Dialect
    ) -> None:
        clause = cast(ClauseElement, stmt)
        compiled: Compiled = clause.compile(dialect=dialect, column_keys=list(names))
        if getattr(compiled, "insert_prefetch", None) or getattr(compiled, "update_prefetch", None):
            # A Python-side default or onupdate would be bound as NULL here.
            raise ValueError(f"a column default computed in Python is not supported: {stmt}")
        sql = str(compiled)
        mark = "%({})s"
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
                marker = _POSTCOMPILE.format(name)
                if value is None and sql.count(marker) != sql.count(f"IN ({marker})"):
                    # Padded with its last value (_places): only an IN list means the same.
                    raise ValueError(f"expanding parameter {name!r} outside an IN list")
                marks = ", ".join(mark.format(f"{name}__{i}") for i in range(n))
                sql = sql.replace(marker, marks)
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
        # The parameters' names by position: $n in order of first use (asyncpg),
        # or one "?" a use, a name used twice given twice (sqlite3).
        sql, self.order = _numbered(sql) if dialect is ASYNCPG else _marked(sql)
        self.sql = sql
        self.plain = not self.fixed and not self.expanding  # values taken from params as given
        self._take = _taker(self.order)
        # Each expanding parameter's placeholders by name, made once, not at each bind.
        self.places = tuple(
            tuple(f"{name}__{i}" for i in range(size))
            for name, size in zip(self.expanding, self.sizes, strict=True)
        )

    def args(self, params: Params) -> tuple[Any, ...]:
        """The values the driver binds, by position (``order``)."""
        return self._take(params if self.plain else self.bind(params))

    def bind(self, params: Params) -> dict[str, Any]:
        bound = {**self.fixed, **params}
        for name, places in zip(self.expanding, self.places, strict=True):
            values = bound.pop(name)
            if not 0 < len(values) <= len(places):
                raise ValueError(f"{len(values)} values for the {len(places)} places of {name!r}")
            bound.update(zip(places, values, strict=False))  # fewer values: padded below
            last = values[-1]
            for place in places[len(values) :]:  # the places past the list: its last again
                bound[place] = last
        return bound


def _places(n: int) -> int:
    """How many placeholders a list of ``n`` values is sent in: the next power of two.

    Every expanding parameter is an ``IN`` list (the repositories' statements
    use them for nothing else), where a value given twice changes nothing; so a list is
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


class _Marks:
    """A "?" for each parameter of pyformat SQL; their names, in order, in ``order``."""

    def __init__(self) -> None:
        self.order: list[str] = []

    def __getitem__(self, name: str) -> str:
        self.order.append(name)
        return "?"


def _marked(sql: str) -> tuple[str, tuple[str, ...]]:
    """Pyformat ``sql`` with "?" for its parameters, and their names in order."""
    marks = _Marks()
    return sql % marks, tuple(marks.order)


def _taker(order: Sequence[str]) -> Callable[[Params], tuple[Any, ...]]:
    """A function of a statement's parameters to their values in ``order``, as a tuple."""
    if len(order) > 1:
        return operator.itemgetter(*order)
    if order:
        (name,) = order
        return lambda params: (params[name],)
    return lambda params: ()


def _numbered(sql: str) -> tuple[str, tuple[str, ...]]:
    """Pyformat ``sql`` with $1, $2... for its parameters, and their names in order."""
    numbers = _Numbers()
    return sql % numbers, tuple(numbers.order)


_COMBINED: dict[tuple[int, ...], tuple[tuple[Plan, ...], str, tuple[str, ...]]] = {}


def combined(plans: Sequence[Plan]) -> tuple[str, tuple[str, ...]]:
    """One statement running ``plans`` as data-modifying CTEs: ``WITH w0 AS (...) SELECT 1``.

    The parameters of the k-th are renamed ``wk_<name>``. Cached by the plans'
    identities, checked as :func:`plan_of` checks statements'.
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


_PLANS: dict[tuple[int, str, tuple[str, ...], tuple[int, ...]], tuple[Executable, Plan]] = {}


# The plans whose SQL does not depend on their lists' lengths (no expanding
# parameter), by statement and parameter names alone: most statements, found
# without measuring every value of every call (some 4% of a create's writer
# instructions, by cachegrind).
_FLAT: dict[tuple[int, str, tuple[str, ...]], tuple[Executable, Plan]] = {}


def plan_of(stmt: Executable, params: Params, dialect: Dialect = SQLITE) -> Plan:
    """``stmt``'s plan for ``dialect`` and the shape of ``params``, compiled at its first use."""
    names = tuple(params)
    flat = _FLAT.get((id(stmt), dialect.name, names))
    if flat is not None and flat[0] is stmt:
        return flat[1]
    lengths = tuple([_places(len(v)) if isinstance(v, list) else -1 for v in params.values()])
    key = (id(stmt), dialect.name, names, lengths)
    found = _PLANS.get(key)
    if found is None or found[0] is not stmt:
        # Keeps stmt alive with its plan, so its id stays its own.
        found = (stmt, Plan(stmt, names, lengths, dialect))
        _PLANS[key] = found
        if not found[1].expanding:
            _FLAT[(id(stmt), dialect.name, names)] = found
    return found[1]


def compiled_shapes(stmt: Executable, dialect: str) -> int:
    """How many shapes of ``stmt`` have been compiled for ``dialect`` (by name)."""
    return sum(1 for key in _PLANS if key[0] == id(stmt) and key[1] == dialect)
