"""An ``IN`` list is sent in a few shapes, not one per length, and still means itself.

adapters/store/plans.py pads an expanding parameter's list with its last value
up to the next power of two. Before, a list of every length was a statement of
its own: compiled by SQLAlchemy (milliseconds), prepared again by sqlite3 or
asyncpg. The relay's batches (up to hundreds of ids) made one per batch size.
On SQLite and PostgreSQL, alone and among writes joined into one statement.
"""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import bindparam, delete, insert, select

from slotward.adapters.store import tables as t
from slotward.adapters.store.plans import compiled_shapes, plan_of
from slotward.engine.ports import Store, UnitOfWork

_W = t.workflow_stats
_ADD = insert(_W).values(
    tenant="acme", workflow_id=bindparam("workflow_id"), replays=bindparam("replays"), storms=0
)
_SOME = select(_W.c.workflow_id).where(
    _W.c.tenant == "acme", _W.c.workflow_id.in_(bindparam("ids", expanding=True))
)
_DROP = delete(_W).where(
    _W.c.tenant == "acme", _W.c.workflow_id.in_(bindparam("ids", expanding=True))
)
_ALL = select(_W.c.workflow_id)
COUNT = 40


@pytest.fixture
async def store(either_store: Store) -> Store:
    """The store, with COUNT workflows' rows in it."""

    def fill(uow: UnitOfWork) -> None:
        with uow:
            rows = [{"workflow_id": f"w{i:02}", "replays": i} for i in range(COUNT)]
            _db(uow).write(_ADD, rows)
            uow.commit()

    await either_store.write(fill)
    return either_store


def _db(uow: UnitOfWork) -> Any:
    return uow._db  # type: ignore[attr-defined]


def _shapes(stmt: Any, url: str) -> int:
    """The plans compiled for ``stmt`` on the dialect of ``url``."""
    return compiled_shapes(stmt, "sqlite" if url.startswith("sqlite") else "postgresql")


async def test_a_list_of_every_length_finds_its_rows_in_a_few_shapes(
    store: Store, either_url: str
) -> None:
    async def found(ids: list[str]) -> list[str]:
        def run(uow: UnitOfWork) -> list[str]:
            with uow:
                return sorted(row[0] for row in _db(uow).rows(_SOME, {"ids": ids}))

        return await store.read(run)

    for n in range(1, COUNT + 1):
        ids = [f"w{i:02}" for i in reversed(range(n))]  # its last value is the one repeated
        assert await found(ids) == sorted(ids)
    # Given twice, and with an id that is nowhere: the same rows, no more.
    assert await found(["w03", "w01", "w03", "nope", "w01"]) == ["w01", "w03"]
    # Lengths 1 to 40 in lists of 1, 2, 4, 8, 16, 32 and 64 places: seven shapes, not forty.
    assert _shapes(_SOME, either_url) == 7


async def test_padded_lists_among_writes_sent_together(store: Store) -> None:
    def run(uow: UnitOfWork) -> list[str]:
        with uow:
            # Put aside and sent as one statement on PostgreSQL: the second
            # list's places are numbered after the first's.
            _db(uow).put(_DROP, {"ids": ["w00", "w01", "w02"]})  # 3 values in 4 places
            _db(uow).put(_DROP, {"ids": ["w10", "w11", "w12", "w13", "w14"]})  # 5 in 8
            left = sorted(row[0] for row in _db(uow).rows(_ALL))
            uow.commit()
            return left

    gone = {"w00", "w01", "w02", "w10", "w11", "w12", "w13", "w14"}
    kept = [f"w{i:02}" for i in range(COUNT) if f"w{i:02}" not in gone]
    assert await store.write(run) == kept


def test_a_list_longer_than_its_places_is_refused() -> None:
    plan = plan_of(_SOME, {"ids": ["a", "b", "c"]})  # four places
    assert plan.bind({"ids": ["a", "b", "c", "d"]})["ids__3"] == "d"
    with pytest.raises(ValueError, match="5 values for the 4 places"):
        plan.bind({"ids": ["a", "b", "c", "d", "e"]})
    with pytest.raises(ValueError, match="0 values"):
        plan.bind({"ids": []})


def test_a_list_outside_an_in_is_refused() -> None:
    """Padding a list with its last value keeps an IN's meaning, and nothing else's."""
    wrong = select(_W.c.workflow_id).where(_W.c.workflow_id == bindparam("ids", expanding=True))
    with pytest.raises(ValueError, match="outside an IN list"):
        plan_of(wrong, {"ids": ["a", "b", "c"]})
    not_in = select(_W.c.workflow_id).where(
        _W.c.workflow_id.not_in(bindparam("ids", expanding=True))
    )
    assert plan_of(not_in, {"ids": ["a", "b", "c"]}).sizes == (4,)
