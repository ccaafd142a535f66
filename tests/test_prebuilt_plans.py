"""A guardrail: every prebuilt statement of the store is a plan the driver runner can run.

The runner (adapters/store/runner.py) compiles a module-level statement once per
dialect (adapters/store/plans.py) and binds only plain and expanding (``IN``)
parameters. A construct that SQLAlchemy renders with a parameter of its own
to fill in at execution (``func.aggregate_strings``' separator, say) compiles,
but the runner refuses it at its first call, on the hot path. Each statement
is planned here for each dialect it may run on, so such a statement fails
here first.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any

import pytest
from sqlalchemy import ClauseElement, Dialect, Executable, column, func, select, table

import slotward.adapters.store as store
from slotward.adapters.store.plans import ASYNCPG, SQLITE, Plan

_BOTH = (SQLITE, ASYNCPG)
_BY_NAME = {"sqlite": (SQLITE,), "postgresql": (ASYNCPG,)}  # a dict of statements by dialect

Found = tuple[str, Executable, tuple[Dialect, ...]]


def _collect(label: str, value: Any, dialects: tuple[Dialect, ...], into: list[Found]) -> None:
    if isinstance(value, ClauseElement) and isinstance(value, Executable):
        into.append((label, value, dialects))
    elif isinstance(value, dict):
        for key, item in value.items():
            chosen = _BY_NAME.get(key, dialects) if isinstance(key, str) else dialects
            _collect(f"{label}[{key!r}]", item, chosen, into)
    elif isinstance(value, tuple | list):
        for i, item in enumerate(value):
            _collect(f"{label}[{i}]", item, dialects, into)


def _prebuilt() -> list[Found]:
    found: list[Found] = []
    for info in pkgutil.walk_packages(store.__path__, f"{store.__name__}."):
        if ".migrations" in info.name:
            continue
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            _collect(f"{info.name}.{name}", value, _BOTH, found)
    return found


def _plan(stmt: Executable, dialect: Dialect) -> Plan:
    """``stmt``'s plan with a value for each parameter the caller binds (a list for an IN)."""
    binds = stmt.compile(dialect=dialect).binds  # type: ignore[attr-defined]
    given = {
        name: ["v"] if bind.expanding else "v"
        for name, bind in binds.items()
        if bind.value is None and bind.callable is None and not name.startswith("%(")
    }
    lengths = [1 if isinstance(v, list) else -1 for v in given.values()]
    return Plan(stmt, list(given), lengths, dialect)


PREBUILT = _prebuilt()


def test_the_store_has_prebuilt_statements_to_check() -> None:
    assert len(PREBUILT) > 100  # the scan found the repositories' statements


@pytest.mark.parametrize(("label", "stmt", "dialects"), PREBUILT, ids=[f[0] for f in PREBUILT])
def test_every_prebuilt_statement_is_a_plan_for_its_dialects(
    label: str, stmt: Executable, dialects: tuple[Dialect, ...]
) -> None:
    for dialect in dialects:
        assert _plan(stmt, dialect).sql, (label, dialect.name)


def test_a_parameter_filled_in_at_execution_is_refused() -> None:
    # What this guard is for: the separator of aggregate_strings is one.
    joined = select(func.aggregate_strings(table("x", column("a")).c.a, ","))
    for dialect in _BOTH:
        with pytest.raises(ValueError, match="unexpanded parameter"):
            _plan(joined, dialect)
