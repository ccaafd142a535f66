"""Deliveries: claimed when due, per hold and subscription in event order; tried, killed,
re-driven."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from sqlalchemy.exc import IntegrityError

from slotward.engine.model import Attempt, Delivery
from slotward.engine.ports import UnitOfWork
from tests.contract.conftest import Db
from tests.contract.values import NOW, at, delivery, event, subscription

UNTIL = at(5)


def _claim(db: Db, owner: str = "relay-a", now: int = 0, limit: int = 10) -> list[str]:
    claims = db.commit(lambda uow: uow.deliveries.claim(owner, at(now), at(now + 5), limit))
    return [c.delivery.id for c in claims]


def _setup(db: Db, *deliveries: Delivery, fanned: bool = True) -> None:
    """The events and subscriptions these deliveries need, fanned out."""

    def add(uow: UnitOfWork) -> None:
        for sub in sorted({d.subscription_id for d in deliveries}):
            uow.webhooks.add(subscription(sub))
        seen: set[str] = set()
        for d in deliveries:
            if d.event_id not in seen:
                seen.add(d.event_id)
                uow.outbox.add(event(d.event_id, hold_id=d.hold_id, seq=d.seq, fanned=fanned))
        uow.deliveries.add(list(deliveries))

    db.commit(add)


def _get(db: Db, delivery_id: str) -> Delivery:
    found = db.look(lambda uow: uow.deliveries.get(delivery_id))
    assert found is not None
    return found


def _save(db: Db, changed: Delivery) -> None:
    db.commit(lambda uow: uow.deliveries.save(changed))


def test_a_delivery_reads_back_as_written(db: Db) -> None:
    written = delivery("dlv_1", "evt_1", "whk_1", last_status=503, last_error="timeout")
    _setup(db, written)
    assert _get(db, "dlv_1") == written
    assert db.look(lambda uow: uow.deliveries.get("dlv_9")) is None


def test_one_delivery_per_event_and_subscription(db: Db) -> None:
    _setup(db, delivery("dlv_1", "evt_1", "whk_1"))
    with pytest.raises((KeyError, IntegrityError)):
        db.commit(lambda uow: uow.deliveries.add([delivery("dlv_2", "evt_1", "whk_1")]))


def test_a_claim_carries_the_event_and_subscription_and_is_saved(db: Db) -> None:
    _setup(db, delivery("dlv_1", "evt_1", "whk_1"))
    [claim] = db.commit(lambda uow: uow.deliveries.claim("relay-a", NOW, UNTIL, 10))
    assert (claim.delivery.claim_owner, claim.delivery.claim_until) == ("relay-a", UNTIL)
    assert claim.event == db.look(lambda uow: uow.outbox.get("acme", "evt_1"))
    assert claim.subscription == db.look(lambda uow: uow.webhooks.get("acme", "whk_1"))
    assert _get(db, "dlv_1") == claim.delivery


def test_only_due_deliveries_are_claimed(db: Db) -> None:
    _setup(
        db,
        delivery("dlv_1", "evt_1", "whk_1", hold_id="h1", due=at(1)),  # later
        delivery("dlv_2", "evt_2", "whk_1", hold_id="h2", state="delivered"),
        delivery("dlv_3", "evt_3", "whk_1", hold_id="h3", state="dead"),
        delivery("dlv_4", "evt_4", "whk_1", hold_id="h4"),
    )
    assert _claim(db) == ["dlv_4"]
    assert _claim(db, now=1) == ["dlv_1"]


def test_a_live_claim_is_left_alone_and_one_over_is_claimed_again(db: Db) -> None:
    _setup(db, delivery("dlv_1", "evt_1", "whk_1"))
    assert _claim(db, "relay-a", now=0) == ["dlv_1"]  # until at(5)
    assert _claim(db, "relay-b", now=4) == []
    assert _claim(db, "relay-a", now=4) == []  # its own too: one relay sends it once
    assert _claim(db, "relay-b", now=5) == ["dlv_1"]
    assert _get(db, "dlv_1").claim_owner == "relay-b"


def test_a_disabled_subscription_gets_nothing(db: Db) -> None:
    _setup(db, delivery("dlv_1", "evt_1", "whk_1"))
    sub = db.look(lambda uow: uow.webhooks.get("acme", "whk_1"))
    assert sub is not None
    db.commit(lambda uow: uow.webhooks.save(replace(sub, status="disabled")))
    assert _claim(db) == []


def test_the_soonest_come_first_up_to_the_limit(db: Db) -> None:
    _setup(
        db,
        delivery("dlv_1", "evt_1", "whk_1", hold_id="h1", due=at(-1)),
        delivery("dlv_2", "evt_2", "whk_1", hold_id="h2", due=at(-3)),
        delivery("dlv_3", "evt_3", "whk_2", hold_id="h3", due=at(-1)),  # the same: by id
        delivery("dlv_4", "evt_4", "whk_2", hold_id=None, seq=None, due=at(-2)),
    )
    assert _claim(db, limit=3) == ["dlv_2", "dlv_4", "dlv_1"]
    assert _claim(db, limit=3) == ["dlv_3"]


def test_a_holds_later_event_waits_for_the_earlier_to_the_same_subscription(db: Db) -> None:
    first = delivery("dlv_1", "evt_1", "whk_1", seq=1, due=at(1))
    _setup(
        db,
        first,
        delivery("dlv_2", "evt_2", "whk_1", seq=2),
        delivery("dlv_3", "evt_2", "whk_2", seq=2),  # another subscription: not held back
        delivery("dlv_4", "evt_4", "whk_1", hold_id="hold_2", seq=5),  # another hold
    )
    assert _claim(db) == ["dlv_3", "dlv_4"]
    assert _claim(db, now=1) == ["dlv_1"]
    assert _claim(db, now=3) == []  # dlv_1 is in flight: dlv_2 still waits
    _save(db, replace(_get(db, "dlv_1"), state="delivered"))
    assert _claim(db, now=3) == ["dlv_2"]


def test_a_dead_earlier_event_holds_nothing_back(db: Db) -> None:
    _setup(
        db,
        delivery("dlv_1", "evt_1", "whk_1", seq=1, state="dead"),
        delivery("dlv_2", "evt_2", "whk_1", seq=2),
    )
    assert _claim(db) == ["dlv_2"]


def test_an_earlier_event_not_yet_fanned_out_holds_the_later_back(db: Db) -> None:
    _setup(db, delivery("dlv_2", "evt_2", "whk_1", seq=2))
    db.commit(lambda uow: uow.outbox.add(event("evt_1", seq=1)))  # not fanned out
    db.commit(lambda uow: uow.outbox.add(event("evt_9", hold_id="hold_2", seq=1)))
    assert _claim(db) == []
    db.commit(lambda uow: uow.outbox.mark_fanned(["evt_1"]))  # to nobody
    assert _claim(db) == ["dlv_2"]


def test_a_claim_not_committed_was_never_made(db: Db) -> None:
    _setup(db, delivery("dlv_1", "evt_1", "whk_1"))
    db.look(lambda uow: uow.deliveries.claim("relay-a", NOW, UNTIL, 10))
    assert _claim(db, "relay-b") == ["dlv_1"]


def test_save_writes_back_the_outcome(db: Db) -> None:
    _setup(db, delivery("dlv_1", "evt_1", "whk_1"))
    tried = replace(
        _get(db, "dlv_1"),
        state="delivered",
        attempts=2,
        next_attempt_at=at(3),
        delivered_at=at(2),
        last_status=204,
        last_error=None,
        claim_owner=None,
        claim_until=None,
    )
    db.commit(lambda uow: uow.deliveries.save(replace(tried, event_id="evt_x", seq=9)))
    assert _get(db, "dlv_1") == tried  # what it belongs to stays


def test_attempts_are_numbered_across_drives(db: Db) -> None:
    _setup(db, delivery("dlv_1", "evt_1", "whk_1"), delivery("dlv_2", "evt_1", "whk_2"))

    def tries(uow: UnitOfWork) -> list[Attempt]:
        return [
            uow.deliveries.add_attempt("dlv_1", at(1), None, "connection refused"),
            uow.deliveries.add_attempt("dlv_1", at(2), 500, None),
            uow.deliveries.add_attempt("dlv_2", at(2), 200, None),
        ]

    made = db.commit(tries)
    assert [(a.delivery_id, a.n) for a in made] == [("dlv_1", 1), ("dlv_1", 2), ("dlv_2", 1)]
    _save(db, replace(_get(db, "dlv_1"), state="dead"))
    assert db.commit(lambda uow: uow.deliveries.redrive("evt_1", at(3))) == 1
    third = db.commit(lambda uow: uow.deliveries.add_attempt("dlv_1", at(4), 204, None))
    assert third == Attempt("dlv_1", 3, at(4), 204, None)
    assert db.look(lambda uow: uow.deliveries.attempts("dlv_1")) == [
        Attempt("dlv_1", 1, at(1), None, "connection refused"),
        Attempt("dlv_1", 2, at(2), 500, None),
        third,
    ]


def test_an_events_deliveries_come_by_subscription(db: Db) -> None:
    _setup(
        db,
        delivery("dlv_1", "evt_1", "whk_2"),
        delivery("dlv_2", "evt_1", "whk_1"),
        delivery("dlv_3", "evt_2", "whk_1", seq=2),
    )
    found = db.look(lambda uow: uow.deliveries.for_event("evt_1"))
    assert [d.id for d in found] == ["dlv_2", "dlv_1"]


def test_kill_pending_makes_the_subscriptions_pending_ones_dead(db: Db) -> None:
    _setup(
        db,
        delivery("dlv_1", "evt_1", "whk_1"),
        delivery("dlv_2", "evt_2", "whk_1", seq=2, state="delivered"),
        delivery("dlv_3", "evt_3", "whk_1", seq=3),
        delivery("dlv_4", "evt_1", "whk_2"),
    )
    assert _claim(db) == ["dlv_1", "dlv_4"]
    killed = db.commit(lambda uow: uow.deliveries.kill_pending("whk_1", at(1), "disabled: 410"))
    assert sorted(killed) == ["evt_1", "evt_3"]
    dead = _get(db, "dlv_1")
    assert (dead.state, dead.last_error, dead.claim_owner, dead.claim_until) == (
        "dead",
        "disabled: 410",
        None,
        None,
    )
    assert _get(db, "dlv_3").state == "dead"
    assert _get(db, "dlv_2").state == "delivered"
    assert _get(db, "dlv_4").state == "pending"


def test_remove_for_subscription_deletes_its_deliveries_and_attempts(db: Db) -> None:
    _setup(
        db,
        delivery("dlv_1", "evt_1", "whk_1"),
        delivery("dlv_2", "evt_2", "whk_1", seq=2, state="dead"),
        delivery("dlv_3", "evt_1", "whk_2"),
    )
    db.commit(lambda uow: uow.deliveries.add_attempt("dlv_1", at(1), 500, None))
    db.commit(lambda uow: uow.deliveries.add_attempt("dlv_3", at(1), 500, None))
    gone = db.commit(lambda uow: uow.deliveries.remove_for_subscription("whk_1"))
    assert sorted(gone) == ["evt_1", "evt_2"]
    assert db.look(lambda uow: uow.deliveries.get("dlv_1")) is None
    assert db.look(lambda uow: uow.deliveries.attempts("dlv_1")) == []
    assert len(db.look(lambda uow: uow.deliveries.attempts("dlv_3"))) == 1
    assert db.commit(lambda uow: uow.deliveries.remove_for_subscription("whk_1")) == []


def test_redrive_revives_the_dead_to_active_subscriptions_only(db: Db) -> None:
    dead: dict[str, Any] = {"state": "dead", "attempts": 8, "last_status": 500, "due": at(-60)}
    _setup(
        db,
        delivery("dlv_1", "evt_1", "whk_1", **dead),
        delivery("dlv_2", "evt_1", "whk_2", **dead),  # its subscription is disabled
        delivery("dlv_3", "evt_1", "whk_3", state="delivered"),
        delivery("dlv_4", "evt_2", "whk_1", seq=2, **dead),  # another event
    )
    db.commit(lambda uow: uow.deliveries.add_attempt("dlv_1", at(-60), 500, None))
    sub = db.look(lambda uow: uow.webhooks.get("acme", "whk_2"))
    assert sub is not None
    db.commit(lambda uow: uow.webhooks.save(replace(sub, status="disabled")))

    assert db.commit(lambda uow: uow.deliveries.redrive("evt_1", at(1))) == 1
    revived = _get(db, "dlv_1")
    assert (revived.state, revived.attempts, revived.next_attempt_at) == ("pending", 0, at(1))
    assert (revived.claim_owner, revived.claim_until) == (None, None)
    assert len(db.look(lambda uow: uow.deliveries.attempts("dlv_1"))) == 1  # the log kept
    assert [_get(db, d).state for d in ("dlv_2", "dlv_3", "dlv_4")] == [
        "dead",
        "delivered",
        "dead",
    ]
    assert db.commit(lambda uow: uow.deliveries.redrive("evt_1", at(1))) == 0
    assert _claim(db, now=1) == ["dlv_1"]


def test_get_many_reads_the_existing_ones_in_id_order(db: Db) -> None:
    two = delivery("dlv_2", "evt_1", "whk_2")
    one = delivery("dlv_1", "evt_1", "whk_1")
    _setup(db, two, one)
    found = db.look(lambda uow: uow.deliveries.get_many(["dlv_2", "dlv_9", "dlv_1", "dlv_2"]))
    assert found == [one, two]
    assert db.look(lambda uow: uow.deliveries.get_many([])) == []


def test_save_many_writes_back_each_outcome(db: Db) -> None:
    _setup(db, delivery("dlv_1", "evt_1", "whk_1"), delivery("dlv_2", "evt_1", "whk_2"))
    done = replace(_get(db, "dlv_1"), state="delivered", attempts=1, delivered_at=at(2))
    again = replace(_get(db, "dlv_2"), attempts=1, next_attempt_at=at(9), last_status=500)
    db.commit(lambda uow: uow.deliveries.save_many([done, again]))
    assert (_get(db, "dlv_1"), _get(db, "dlv_2")) == (done, again)
    db.commit(lambda uow: uow.deliveries.save_many([]))  # nothing to do is no error


def test_add_attempts_numbers_each_one_past_its_deliverys_last(db: Db) -> None:
    _setup(db, delivery("dlv_1", "evt_1", "whk_1"), delivery("dlv_2", "evt_1", "whk_2"))
    db.commit(lambda uow: uow.deliveries.add_attempt("dlv_1", at(1), 500, "HTTP 500"))
    db.commit(
        lambda uow: uow.deliveries.add_attempts(
            [("dlv_1", at(2), None, "timed out"), ("dlv_2", at(2), 204, None)]
        )
    )
    db.commit(lambda uow: uow.deliveries.add_attempts([("dlv_1", at(3), 200, None)]))
    assert db.look(lambda uow: uow.deliveries.attempts("dlv_1")) == [
        Attempt("dlv_1", 1, at(1), 500, "HTTP 500"),
        Attempt("dlv_1", 2, at(2), None, "timed out"),
        Attempt("dlv_1", 3, at(3), 200, None),
    ]
    assert db.look(lambda uow: uow.deliveries.attempts("dlv_2")) == [
        Attempt("dlv_2", 1, at(2), 204, None)
    ]
    with pytest.raises(ValueError, match="one attempt per delivery"):
        db.commit(
            lambda uow: uow.deliveries.add_attempts(
                [("dlv_2", at(4), 500, None), ("dlv_2", at(5), 500, None)]
            )
        )
