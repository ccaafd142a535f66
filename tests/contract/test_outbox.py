"""Outbox: events in per-hold order, fanned out oldest first, settled from their deliveries."""

from __future__ import annotations

from dataclasses import replace

import pytest

from slotward.engine.model import DeliveryState, Gauges, OutboxEvent
from slotward.engine.ports import UnitOfWork
from tests.contract.conftest import Db
from tests.contract.values import NOW, at, delivery, event, hold, subscription


def _events(db: Db, tenant: str = "acme", state: DeliveryState | None = None) -> list[OutboxEvent]:
    return db.look(lambda uow: uow.outbox.search(tenant, state, None, 100))


def test_an_event_reads_back_as_written_with_its_place_among_its_holds(db: Db) -> None:
    written = event("evt_1", seq=3, payload={"hold": {"id": "hold_1", "title": "Sync ✓"}})
    db.commit(lambda uow: uow.outbox.add(written))
    assert db.look(lambda uow: uow.outbox.get("acme", "evt_1")) == written
    assert written.state == "pending"
    assert not written.fanned
    assert written.settled_at is None


def test_an_event_of_no_hold_has_no_place(db: Db) -> None:
    db.commit(lambda uow: uow.outbox.add(event("evt_1", hold_id=None, seq=None)))
    found = db.look(lambda uow: uow.outbox.get("acme", "evt_1"))
    assert found is not None
    assert (found.hold_id, found.seq) == (None, None)


def test_a_hold_keeps_how_many_events_it_has_emitted(db: Db) -> None:
    db.commit(lambda uow: uow.holds.add(hold("hold_1", event_seq=1)))
    stored = db.look(lambda uow: uow.holds.get("acme", "hold_1"))
    assert stored is not None
    assert stored.event_seq == 1
    db.commit(lambda uow: uow.holds.save(replace(stored, event_seq=2, token=2)))
    again = db.look(lambda uow: uow.holds.get("acme", "hold_1"))
    assert again is not None
    assert again.event_seq == 2


def test_another_tenants_event_is_not_found(db: Db) -> None:
    db.commit(lambda uow: uow.outbox.add(event("evt_1")))
    assert db.look(lambda uow: uow.outbox.get("other", "evt_1")) is None
    assert _events(db, "other") == []


def test_unfanned_events_come_oldest_first_until_marked(db: Db) -> None:
    def add(uow: UnitOfWork) -> None:
        uow.outbox.add(event("evt_3", created_at=at(1)))
        uow.outbox.add(event("evt_2", created_at=at(2), tenant="other"))
        uow.outbox.add(event("evt_1", created_at=at(2)))  # the same instant: by id
        uow.outbox.add(event("evt_0", created_at=at(3)))

    db.commit(add)
    assert [e.id for e in db.look(lambda uow: uow.outbox.unfanned(3))] == [
        "evt_3",
        "evt_1",
        "evt_2",
    ]
    db.commit(lambda uow: uow.outbox.mark_fanned(["evt_3", "evt_2"]))
    assert [e.id for e in db.look(lambda uow: uow.outbox.unfanned(10))] == ["evt_1", "evt_0"]
    fanned = db.look(lambda uow: uow.outbox.get("acme", "evt_3"))
    assert fanned is not None
    assert fanned.fanned
    assert fanned.state == "pending"


def _fanned_with(db: Db, states: list[DeliveryState]) -> None:
    def add(uow: UnitOfWork) -> None:
        uow.outbox.add(event("evt_1"))
        for n, _ in enumerate(states):
            uow.webhooks.add(subscription(f"whk_{n}"))
        uow.deliveries.add(
            [delivery(f"dlv_{n}", "evt_1", f"whk_{n}", state=s) for n, s in enumerate(states)]
        )
        uow.outbox.mark_fanned(["evt_1"])

    db.commit(add)


def _settle(db: Db, when: int = 1) -> OutboxEvent:
    db.commit(lambda uow: uow.outbox.settle(["evt_1"], at(when)))
    found = db.look(lambda uow: uow.outbox.get("acme", "evt_1"))
    assert found is not None
    return found


@pytest.mark.parametrize(
    ("states", "settled"),
    [
        ([], "delivered"),  # fanned out to nobody
        (["delivered", "delivered"], "delivered"),
        (["delivered", "dead"], "dead"),
        (["dead", "pending"], "pending"),
        (["pending", "delivered"], "pending"),
    ],
)
def test_settle_takes_the_state_of_the_deliveries(
    db: Db, states: list[DeliveryState], settled: DeliveryState
) -> None:
    _fanned_with(db, states)
    found = _settle(db)
    assert found.state == settled
    assert found.settled_at == (None if settled == "pending" else at(1))


def test_a_settled_event_goes_back_to_pending_and_settles_again(db: Db) -> None:
    _fanned_with(db, ["dead"])
    assert _settle(db, 1).state == "dead"
    assert _settle(db, 2).settled_at == at(1)  # unchanged: settled when it left pending
    db.commit(lambda uow: uow.deliveries.redrive("evt_1", at(3)))
    back = _settle(db, 3)
    assert (back.state, back.settled_at) == ("pending", None)
    found = db.look(lambda uow: uow.deliveries.get("dlv_0"))
    assert found is not None
    db.commit(lambda uow: uow.deliveries.save(replace(found, state="delivered")))
    again = _settle(db, 4)
    assert (again.state, again.settled_at) == ("delivered", at(4))


def test_an_event_not_fanned_out_is_not_settled(db: Db) -> None:
    db.commit(lambda uow: uow.outbox.add(event("evt_1")))
    found = _settle(db)
    assert (found.state, found.fanned, found.settled_at) == ("pending", False, None)


def test_search_by_state_pages_in_id_order_within_the_tenant(db: Db) -> None:
    def add(uow: UnitOfWork) -> None:
        for n in range(1, 6):
            state: DeliveryState = "dead" if n % 2 else "delivered"
            uow.outbox.add(event(f"evt_{n}", state=state, fanned=True, settled_at=NOW))
        uow.outbox.add(event("evt_9", tenant="other", state="dead", fanned=True))

    db.commit(add)
    assert [e.id for e in _events(db, state="dead")] == ["evt_1", "evt_3", "evt_5"]
    page = db.look(lambda uow: uow.outbox.search("acme", "dead", "evt_1", 1))
    assert [e.id for e in page] == ["evt_3"]
    assert [e.id for e in db.look(lambda uow: uow.outbox.search("acme", None, "evt_3", 10))] == [
        "evt_4",
        "evt_5",
    ]
    assert _events(db, state="pending") == []


def test_purge_deletes_old_delivered_events_with_their_deliveries_and_attempts(db: Db) -> None:
    def add(uow: UnitOfWork) -> None:
        uow.webhooks.add(subscription("whk_1"))
        for n, (state, settled) in enumerate(
            [("delivered", 1), ("delivered", 2), ("delivered", 9), ("dead", 1), ("pending", None)]
        ):
            settled_at = None if settled is None else at(settled)
            uow.outbox.add(event(f"evt_{n}", state=state, fanned=True, settled_at=settled_at))
            uow.deliveries.add([delivery(f"dlv_{n}", f"evt_{n}", "whk_1", state=state)])
            uow.deliveries.add_attempt(f"dlv_{n}", at(0), 200, None)

    db.commit(add)
    assert db.commit(lambda uow: uow.outbox.purge_delivered(at(5), 1)) == 1
    assert db.commit(lambda uow: uow.outbox.purge_delivered(at(5), 10)) == 1
    assert db.commit(lambda uow: uow.outbox.purge_delivered(at(5), 10)) == 0
    assert [e.id for e in _events(db)] == ["evt_2", "evt_3", "evt_4"]
    gone = db.look(lambda uow: [uow.deliveries.get(d) for d in ("dlv_0", "dlv_1")])
    assert gone == [None, None]
    logs = db.look(lambda uow: [uow.deliveries.attempts(d) for d in ("dlv_0", "dlv_1")])
    assert logs == [[], []]
    assert len(db.look(lambda uow: uow.deliveries.attempts("dlv_2"))) == 1


def test_purge_waits_for_both_an_events_making_and_settling_to_pass_the_cutoff(db: Db) -> None:
    # A settling before the making: the clock was set back in between. The
    # event is purged late (once it was made before the cutoff), never early.
    made_late = event("evt_late", state="delivered", fanned=True, created_at=at(6),
                      settled_at=at(1))  # fmt: skip
    old = event("evt_old", state="delivered", fanned=True, created_at=at(0), settled_at=at(2))

    def add(uow: UnitOfWork) -> None:
        uow.outbox.add(made_late)
        uow.outbox.add(old)

    db.commit(add)
    assert db.commit(lambda uow: uow.outbox.purge_delivered(at(5), 10)) == 1
    assert [e.id for e in _events(db)] == ["evt_late"]
    assert db.commit(lambda uow: uow.outbox.purge_delivered(at(7), 10)) == 1
    assert _events(db) == []


def test_the_gauges_show_the_lag_the_dead_and_the_failing(db: Db) -> None:
    def add(uow: UnitOfWork) -> None:
        uow.outbox.add(event("evt_1", created_at=at(3)))
        uow.outbox.add(event("evt_2", created_at=at(2), tenant="other"))
        uow.outbox.add(event("evt_3", created_at=at(1), state="dead", fanned=True))
        uow.outbox.add(event("evt_4", created_at=at(0), state="delivered", fanned=True))
        uow.webhooks.add(subscription("whk_1", consecutive_failures=3))
        uow.webhooks.add(subscription("whk_2", tenant="other", consecutive_failures=1))
        uow.webhooks.add(subscription("whk_3"))

    db.commit(add)
    gauges = db.look(lambda uow: uow.stats.gauges(at(10)))
    assert gauges == Gauges(
        {},
        2,
        None,
        0,
        oldest_pending_event=at(2),
        dead_events=1,
        failing_subscriptions={"whk_1": 3, "whk_2": 1},
    )


def test_an_event_nobody_wants_is_fanned_and_delivered_at_once(db: Db) -> None:
    def add(uow: UnitOfWork) -> None:
        for n in range(3):
            uow.outbox.add(event(f"evt_{n}"))

    db.commit(add)
    db.commit(lambda uow: uow.outbox.mark_fanned(["evt_2"]))  # fanned out to someone before
    db.commit(lambda uow: uow.outbox.mark_unwanted(["evt_0", "evt_2"], at(5)))
    db.commit(lambda uow: uow.outbox.mark_unwanted([], at(6)))  # nothing to do

    def events(uow: UnitOfWork) -> list[OutboxEvent | None]:
        return [uow.outbox.get("acme", f"evt_{n}") for n in range(3)]

    got = db.look(events)
    assert [(e.fanned, e.state, e.settled_at) if e else None for e in got] == [
        (True, "delivered", at(5)),
        (False, "pending", None),
        # One already fanned out is settled from its deliveries, not marked here.
        (True, "pending", None),
    ]
    assert [e.id for e in db.look(lambda uow: uow.outbox.unfanned(10))] == ["evt_1"]
