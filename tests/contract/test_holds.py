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


def _window(
    db: Db, span: tuple[float, float], earliest: float, limit: int = 10, tenant: str = "acme"
) -> list[str]:
    start, end, first = at(span[0]), at(span[1]), at(earliest)
    found = db.look(lambda uow: uow.holds.window(tenant, start, end, first, limit))
    return [h.id for h in found]


def test_a_window_lists_the_holds_overlapping_it_of_any_status_by_start_then_id(db: Db) -> None:
    _add(
        db,
        hold("hold_5", attendees=("a",), start=at(60), end=at(90)),
        hold("hold_2", attendees=("b",), start=at(60), end=at(70), status=HoldStatus.RELEASED),
        hold("hold_1", attendees=("c",), start=at(80), end=at(100), status=HoldStatus.COMMITTED),
        hold("hold_3", attendees=("d",), start=at(30), end=at(61), expires_at=at(-1)),
        hold("hold_4", attendees=("a",), start=at(120), end=at(150), status=HoldStatus.EXPIRED),
        hold("hold_6", tenant="other", attendees=("a",), start=at(60), end=at(90)),
    )  # fmt: skip
    assert _window(db, (0, 200), earliest=-60) == [
        "hold_3", "hold_2", "hold_5", "hold_1", "hold_4",
    ]  # fmt: skip
    found = db.look(lambda uow: uow.holds.window("acme", at(85), at(86), at(0), 10))
    assert found == [
        hold("hold_5", attendees=("a",), start=at(60), end=at(90)),
        hold("hold_1", attendees=("c",), start=at(80), end=at(100), status=HoldStatus.COMMITTED),
    ]  # every field, read back
    assert _window(db, (0, 200), earliest=-60, tenant="other") == ["hold_6"]
    assert _window(db, (0, 200), earliest=-60, tenant="nobody") == []


def test_a_window_is_half_open_at_both_ends(db: Db) -> None:
    _add(db, hold("hold_1", start=at(60), end=at(90)))
    assert _window(db, (90, 120), earliest=0) == []  # the hold ends where it starts
    assert _window(db, (30, 60), earliest=0) == []  # the hold starts where it ends
    found = db.look(
        lambda uow: (
            uow.holds.window("acme", at(90, us=-1), at(120), at(0), 10),
            uow.holds.window("acme", at(30), at(60, us=1), at(0), 10),
        )
    )
    assert [[h.id for h in f] for f in found] == [["hold_1"], ["hold_1"]]  # a microsecond in


def test_a_window_leaves_out_holds_that_start_before_the_earliest_start(db: Db) -> None:
    # The bound a caller gives from the longest hold the policy allows: a hold
    # starting earlier is not looked at, even if it overlaps.
    _add(
        db,
        hold("hold_1", attendees=("a",), start=at(0), end=at(300)),
        hold("hold_2", attendees=("b",), start=at(50), end=at(150)),
        hold("hold_3", attendees=("c",), start=at(100), end=at(130)),
    )
    assert _window(db, (100, 200), earliest=0) == ["hold_1", "hold_2", "hold_3"]
    assert _window(db, (100, 200), earliest=0, limit=0) == []
    assert _window(db, (100, 200), earliest=0.5) == ["hold_2", "hold_3"]
    assert _window(db, (100, 200), earliest=50) == ["hold_2", "hold_3"]  # at it exactly
    assert _window(db, (100, 200), earliest=100) == ["hold_3"]
    assert _window(db, (100, 200), earliest=200) == []


def test_a_window_stops_at_its_limit_from_the_earliest(db: Db) -> None:
    _add(db, *(hold(f"hold_{i}", attendees=(f"p{i}",), start=at(60 + i % 3)) for i in range(6)))
    # starts: 60 (hold_0, hold_3), 61 (hold_1, hold_4), 62 (hold_2, hold_5)
    assert _window(db, (0, 200), earliest=0, limit=3) == ["hold_0", "hold_3", "hold_1"]
    assert _window(db, (0, 200), earliest=0, limit=1) == ["hold_0"]
    assert _window(db, (0, 200), earliest=0) == [
        "hold_0", "hold_3", "hold_1", "hold_4", "hold_2", "hold_5",
    ]  # fmt: skip
