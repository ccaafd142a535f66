"""HoldRepository: what ``get`` returns after ``add`` and ``save``, and ``search``'s pages."""

from __future__ import annotations

from dataclasses import replace

import pytest
from sqlalchemy.exc import IntegrityError

from slotward.engine.model import Hold, HoldStatus
from slotward.engine.ports import UnitOfWork
from tests.contract.conftest import Db
from tests.contract.values import NOW, at, hold


def _add(db: Db, *holds: Hold) -> None:
    def add(uow: UnitOfWork) -> None:
        for h in holds:
            uow.holds.add(h)

    db.commit(add)


def _get(db: Db, hold_id: str, tenant: str = "acme") -> Hold | None:
    return db.look(lambda uow: uow.holds.get(tenant, hold_id))


def test_a_hold_reads_back_as_added_in_its_unit_of_work_and_after(db: Db) -> None:
    added = hold(
        "hold_1", attendees=("b", "a"), description="Q3", committed_at=at(1, us=7),
        preempted_by="hold_9", start=at(60, us=3), expires_at=at(5, us=1),
    )  # fmt: skip

    def add(uow: UnitOfWork) -> Hold | None:
        uow.holds.add(added)
        return uow.holds.get("acme", "hold_1")

    assert db.commit(add) == added
    assert _get(db, "hold_1") == added
    assert _get(db, "hold_1", tenant="other") is None
    assert _get(db, "hold_2") is None


def test_a_hold_not_committed_is_gone(db: Db) -> None:
    db.look(lambda uow: uow.holds.add(hold("hold_1")))
    assert _get(db, "hold_1") is None


def test_a_hold_id_is_stored_once_whatever_the_tenant(db: Db) -> None:
    _add(db, hold("hold_1"))
    for again in (hold("hold_1", title="Again"), hold("hold_1", tenant="other")):
        with pytest.raises((KeyError, IntegrityError)):
            db.commit(lambda uow, h=again: uow.holds.add(h))  # type: ignore[misc]
    assert _get(db, "hold_1") == hold("hold_1")
    assert _get(db, "hold_1", tenant="other") is None


def test_save_writes_back_the_mutable_fields_and_keeps_the_rest(db: Db) -> None:
    _add(db, hold("hold_1"))
    moved = replace(
        hold("hold_1"), status=HoldStatus.COMMITTED, token=2, expires_at=at(9),
        updated_at=at(1), committed_at=at(1), preempted_by="hold_2",
    )  # fmt: skip
    # Fields save does not write: changing them here changes nothing stored.
    ignored = replace(moved, title="Other", attendees=("z",), priority=1, start=at(0))

    def save(uow: UnitOfWork) -> Hold | None:
        uow.holds.save(ignored)
        return uow.holds.get("acme", "hold_1")

    assert db.commit(save) == moved
    assert _get(db, "hold_1") == moved


def test_saving_a_hold_never_added_stores_nothing(db: Db) -> None:
    db.commit(lambda uow: uow.holds.save(hold("hold_1")))
    assert _get(db, "hold_1") is None


def _search(db: Db, tenant: str = "acme", limit: int = 10, **filters: object) -> list[str]:
    def search(uow: UnitOfWork) -> list[Hold]:
        return uow.holds.search(
            tenant,
            workflow_id=filters.get("workflow_id"),  # type: ignore[arg-type]
            statuses=filters.get("statuses"),  # type: ignore[arg-type]
            attendee=filters.get("attendee"),  # type: ignore[arg-type]
            after_id=filters.get("after_id"),  # type: ignore[arg-type]
            limit=limit,
            now=filters.get("now", NOW),  # type: ignore[arg-type]
        )

    return [h.id for h in db.look(search)]


def test_search_pages_through_a_tenants_holds_by_id(db: Db) -> None:
    _add(db, *(hold(f"hold_{i}", attendees=(f"p{i}",)) for i in (4, 2, 5, 1, 3)))
    _add(db, hold("hold_0", tenant="other"))
    assert _search(db) == ["hold_1", "hold_2", "hold_3", "hold_4", "hold_5"]
    assert _search(db, limit=2) == ["hold_1", "hold_2"]
    assert _search(db, limit=2, after_id="hold_2") == ["hold_3", "hold_4"]
    assert _search(db, limit=2, after_id="hold_4") == ["hold_5"]
    assert _search(db, after_id="hold_5") == []
    assert _search(db, tenant="other") == ["hold_0"]


def test_search_filters_by_workflow_and_attendee(db: Db) -> None:
    _add(
        db,
        hold("hold_1", attendees=("a", "b"), workflow_id="w1"),
        hold("hold_2", attendees=("b",), workflow_id="w2", start=at(120)),
        hold("hold_3", attendees=("c",), workflow_id="w1", status=HoldStatus.RELEASED),
    )
    assert _search(db, workflow_id="w1") == ["hold_1", "hold_3"]
    assert _search(db, attendee="b") == ["hold_1", "hold_2"]
    assert _search(db, attendee="c") == ["hold_3"]  # a finished hold keeps its attendees
    assert _search(db, attendee="b", workflow_id="w2") == ["hold_2"]
    assert _search(db, attendee="z") == []


def test_search_matches_statuses_as_readers_see_them(db: Db) -> None:
    # A held hold past its expiry reads as expired, swept or not.
    _add(
        db,
        hold("hold_1", attendees=("a",), expires_at=at(5)),
        hold("hold_2", attendees=("b",), status=HoldStatus.EXPIRED, expires_at=at(1)),
        hold("hold_3", attendees=("c",), status=HoldStatus.COMMITTED, expires_at=at(1)),
        hold("hold_4", attendees=("d",), status=HoldStatus.RELEASED),
        hold("hold_5", attendees=("e",), status=HoldStatus.PREEMPTED),
    )
    held, expired = {HoldStatus.HELD}, {HoldStatus.EXPIRED}
    assert _search(db, statuses=held, now=at(5, us=-1)) == ["hold_1"]
    assert _search(db, statuses=expired, now=at(5, us=-1)) == ["hold_2"]
    assert _search(db, statuses=held, now=at(5)) == []
    assert _search(db, statuses=expired, now=at(5)) == ["hold_1", "hold_2"]
    live = {HoldStatus.HELD, HoldStatus.COMMITTED}
    assert _search(db, statuses=live) == ["hold_1", "hold_3"]
    done = {HoldStatus.RELEASED, HoldStatus.PREEMPTED}
    assert _search(db, statuses=done) == ["hold_4", "hold_5"]
    assert _search(db, statuses=set()) == []
