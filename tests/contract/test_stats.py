"""Outbox and Stats: events are kept for the relay; the gauges count holds as readers see them."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest
from sqlalchemy.exc import IntegrityError

from slotward.engine.model import Gauges, HoldStatus
from slotward.engine.ports import UnitOfWork
from tests.contract.conftest import Db
from tests.contract.values import NOW, at, event, hold, record


def _gauges(db: Db, now: datetime = NOW) -> Gauges:
    return db.look(lambda uow: uow.stats.gauges(now))


def test_an_empty_store_has_nothing_to_show(db: Db) -> None:
    assert _gauges(db) == Gauges({}, 0, None, 0)


def test_every_event_added_waits_for_the_relay_and_one_not_committed_never_does(db: Db) -> None:
    def add(uow: UnitOfWork) -> int:
        uow.outbox.add(event("evt_1"))
        uow.outbox.add(event("evt_2", tenant="other"))
        return uow.stats.gauges(NOW).outbox_backlog

    assert db.commit(add) == 2
    db.look(lambda uow: uow.outbox.add(event("evt_3")))
    assert _gauges(db).outbox_backlog == 2


def test_an_event_id_is_stored_once(db: Db) -> None:
    db.commit(lambda uow: uow.outbox.add(event("evt_1")))
    with pytest.raises((KeyError, IntegrityError)):
        db.commit(lambda uow: uow.outbox.add(event("evt_1", tenant="other")))
    assert _gauges(db).outbox_backlog == 1


def test_holds_count_by_the_status_a_reader_sees_over_every_tenant(db: Db) -> None:
    def add(uow: UnitOfWork) -> None:
        uow.holds.add(hold("hold_1", attendees=("a",), expires_at=at(5)))
        uow.holds.add(hold("hold_2", attendees=("b",), expires_at=at(3), tenant="other"))
        uow.holds.add(hold("hold_3", attendees=("c",), status=HoldStatus.COMMITTED))
        uow.holds.add(hold("hold_4", attendees=("d",), status=HoldStatus.EXPIRED, expires_at=at(1)))

    db.commit(add)
    assert _gauges(db) == Gauges({"held": 2, "committed": 1, "expired": 1}, 0, None, 0)
    # Overdue: held past expiry reads as expired, and the oldest is named.
    assert _gauges(db, at(3)) == Gauges({"held": 1, "committed": 1, "expired": 2}, 0, at(3), 0)
    # No held hold left as such: no "held" count at all, as for any status not seen.
    assert _gauges(db, at(5)) == Gauges({"committed": 1, "expired": 3}, 0, at(3), 0)


def test_executions_count_while_their_lease_runs(db: Db) -> None:
    def add(uow: UnitOfWork) -> None:
        common: dict[str, Any] = {"kind": "execution", "state": "executing", "workflow_id": "wf"}
        uow.ledger.add(record("k1", lease_expires_at=at(2), **common))
        uow.ledger.add(record("k2", lease_expires_at=at(4), tenant="other", **common))
        uow.ledger.add(record("k3", lease_expires_at=at(9), state="succeeded"))

    db.commit(add)
    assert [_gauges(db, at(n)).executing for n in (0, 2, 4)] == [2, 1, 0]
