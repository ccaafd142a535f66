"""Literal SQL text reaches the database as written, through the driver runner.

adapters/store/runner.py gives asyncpg $1, $2... for the parameters of a
prebuilt statement, and renames them when it joins pending writes into one
statement. It once did both with a regular expression over the SQL text,
which would have numbered a ":name" inside a string literal too; now
SQLAlchemy marks the parameters (pyformat, literal "%" doubled) and Python's
%-formatting numbers them. A literal holding ":tenant", "::" and "%" comes
back intact on PostgreSQL, alone and joined with other writes, and on SQLite.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Integer, Select, String, bindparam, insert, literal_column, select

from slotward.adapters.store import tables as t
from slotward.engine.ports import Store, UnitOfWork

TRICKY = "wf :tenant::text 50% $1"
_W = t.workflow_stats
_LITERAL = literal_column(f"'{TRICKY}'", String)
_ECHO: Select[str, int] = select(_LITERAL, bindparam("n", type_=Integer) + 1)
_ADD = insert(_W).values(
    tenant=bindparam("tenant"), workflow_id=_LITERAL.concat(bindparam("suffix", type_=String)),
    replays=bindparam("replays"), storms=0,
)  # fmt: skip
_READ = select(_W.c.workflow_id, _W.c.replays).order_by(_W.c.replays)


def _db(uow: UnitOfWork) -> Any:
    return uow._db  # type: ignore[attr-defined]


async def test_a_literal_with_colons_and_percents_is_read_as_written(either_store: Store) -> None:
    def run(uow: UnitOfWork) -> list[tuple[Any, ...]]:
        with uow:
            return [tuple(row) for row in _db(uow).rows(_ECHO, {"n": 1})]

    assert await either_store.read(run) == [(TRICKY, 2)]


async def test_literals_survive_writes_joined_into_one_statement(either_store: Store) -> None:
    def run(uow: UnitOfWork) -> list[tuple[Any, ...]]:
        with uow:
            for n in range(3):  # put aside, then sent as one statement on PostgreSQL
                _db(uow).put(_ADD, {"tenant": "acme", "suffix": f" #{n}", "replays": n})
            rows = [tuple(row) for row in _db(uow).rows(_READ)]
            uow.commit()
            return rows

    assert await either_store.write(run) == [(f"{TRICKY} #{n}", n) for n in range(3)]
