"""UnitOfWork: what a commit keeps and what leaving without one (or by an exception) drops.

A refused claim commits its audit entry and then raises (engine/usecases/placing.py):
what it did before the commit stays. A commit ends the transaction: more work
takes entering the unit of work again.
"""

from __future__ import annotations

import pytest

from slotward.engine.fakes import InMemoryUnitOfWork, State
from slotward.engine.ports import UnitOfWork
from tests.contract.conftest import Db
from tests.contract.values import entry, hold, record


class _Refused(Exception):
    pass


def test_what_a_refusal_committed_before_raising_stays(db: Db) -> None:
    def refuse(uow: UnitOfWork) -> None:
        with uow:
            uow.lock_tenant("acme")
            uow.audit.append(entry(1))
            uow.commit()
            raise _Refused

    with pytest.raises(_Refused):
        db.run(refuse)
    assert db.look(lambda uow: uow.audit.head("acme")) == (1, entry(1).hash)


def test_a_unit_of_work_committed_is_entered_again_for_more_work(db: Db) -> None:
    def twice(uow: UnitOfWork) -> None:
        for h in (hold("hold_1"), hold("hold_2", attendees=("b",))):
            with uow:
                uow.lock_tenant("acme")
                uow.holds.add(h)
                uow.commit()

    db.run(twice)
    found = db.look(lambda uow: [uow.holds.get("acme", h) for h in ("hold_1", "hold_2")])
    assert found == [hold("hold_1"), hold("hold_2", attendees=("b",))]


def test_the_fake_refuses_work_after_a_commit() -> None:
    # Once the fake kept such work without a commit (its working copy was the
    # committed state); SQLite autocommits it, a grouped SQLite call keeps it
    # in a savepoint, PostgreSQL drops it. No use case does it: the fake, which
    # every unit test runs on, refuses it.
    uow = InMemoryUnitOfWork(State())
    with uow:
        uow.holds.add(hold("hold_1"))
        uow.commit()
        with pytest.raises(RuntimeError, match="before its commit"):
            uow.ledger.add(record("k1"))
    with uow:
        assert uow.holds.get("acme", "hold_1") == hold("hold_1")
        assert uow.ledger.get("acme", "k1") is None


def test_an_exception_drops_everything_not_committed(db: Db) -> None:
    def fail(uow: UnitOfWork) -> None:
        with uow:
            uow.lock_tenant("acme")
            uow.holds.add(hold("hold_1"))
            uow.audit.append(entry(1))
            raise _Refused

    with pytest.raises(_Refused):
        db.run(fail)
    assert db.look(lambda uow: (uow.holds.get("acme", "hold_1"), uow.audit.tenants())) == (None, [])
