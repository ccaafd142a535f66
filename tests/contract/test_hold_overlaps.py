"""HoldRepository: what blocks a claim, what a claim must mark expired, what the sweeper sweeps.

``blocking`` decides conflicts (and its order is the order of the conflicts a
refusal lists and of the holds a preemption audits), ``stale`` what a claim
marks expired before it takes a slot, ``due_for_expiry`` which tenant the
sweeper locks first. Active holds of one attendee never overlap here: on
PostgreSQL an exclusion constraint refuses them (a use case never adds one).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

from slotward.engine.model import Hold, HoldStatus
from slotward.engine.ports import UnitOfWork
from tests.contract.conftest import Db
from tests.contract.values import MAX_HOLD, NOW, at, hold


def _add(db: Db, *holds: Hold) -> None:
    def add(uow: UnitOfWork) -> None:
        for h in holds:
            uow.holds.add(h)

    db.commit(add)


def _ids(holds: list[Hold]) -> list[str]:
    return [h.id for h in holds]


Span = tuple[int, int]  # minutes after NOW


def _blocking(db: Db, attendees: tuple[str, ...], span: Span, now: datetime = NOW) -> list[str]:
    """``blocking``'s answer, the same whether it reads the overlapping holds
    itself or is given their ids by the claim's lookup (a create's one read)."""
    start, end = at(span[0]), at(span[1])
    alone = db.look(lambda uow: uow.holds.blocking("acme", attendees, start, end, now))

    def given_ids(uow: UnitOfWork) -> list[Hold]:
        found = uow.ledger.lookup_claim("acme", "k", "wf", "f" * 64, attendees, now, (start, end))
        assert found.overlapping is not None
        return uow.holds.blocking("acme", attendees, start, end, now, overlapping=found.overlapping)

    assert _ids(db.look(given_ids)) == _ids(alone)
    return _ids(alone)


def _stale(db: Db, attendees: tuple[str, ...], span: Span, now: datetime = NOW) -> list[str]:
    start, end = at(span[0]), at(span[1])
    return _ids(db.look(lambda uow: uow.holds.stale("acme", attendees, start, end, now)))


def test_held_and_committed_holds_block_and_finished_ones_do_not(db: Db) -> None:
    _add(
        db,
        hold("hold_1", attendees=("a",)),
        hold("hold_2", attendees=("b",), status=HoldStatus.COMMITTED, expires_at=at(-60)),
        hold("hold_3", attendees=("c",), status=HoldStatus.RELEASED),
        hold("hold_4", attendees=("d",), status=HoldStatus.EXPIRED),
        hold("hold_5", attendees=("e",), status=HoldStatus.PREEMPTED),
    )
    assert _blocking(db, ("a", "b", "c", "d", "e"), (60, 90)) == ["hold_1", "hold_2"]


def test_a_held_hold_stops_blocking_exactly_at_its_expiry(db: Db) -> None:
    _add(db, hold("hold_1", expires_at=at(5)))
    assert _blocking(db, ("att_a",), (60, 90), now=at(5, us=-1)) == ["hold_1"]
    assert _blocking(db, ("att_a",), (60, 90), now=at(5)) == []


def test_spans_that_only_touch_do_not_overlap(db: Db) -> None:
    _add(db, hold("hold_1", start=at(60), end=at(90)))
    assert _blocking(db, ("att_a",), (30, 60)) == []
    assert _blocking(db, ("att_a",), (90, 120)) == []
    one_us = timedelta(microseconds=1)
    found = db.look(
        lambda uow: (
            uow.holds.blocking("acme", ["att_a"], at(30), at(60) + one_us, NOW),
            uow.holds.blocking("acme", ["att_a"], at(90) - one_us, at(120), NOW),
        )
    )
    assert [_ids(f) for f in found] == [["hold_1"], ["hold_1"]]


def test_a_hold_as_long_as_allowed_is_found_from_its_last_microsecond(db: Db) -> None:
    # The SQL stores look back max_hold from the span's start: the longest hold
    # a use case accepts must still be seen by a span overlapping its very end.
    end = at(60) + MAX_HOLD
    _add(db, hold("hold_1", start=at(60), end=end, expires_at=at(60 * 48)))
    last_us = end - timedelta(microseconds=1)
    found = db.look(lambda uow: uow.holds.blocking("acme", ["att_a"], last_us, end + MAX_HOLD, NOW))
    assert _ids(found) == ["hold_1"]


def test_any_shared_attendee_blocks_and_other_tenants_never_do(db: Db) -> None:
    _add(
        db,
        hold("hold_1", attendees=("a", "b")),
        hold("hold_2", attendees=("c",)),
        hold("hold_3", tenant="other", attendees=("b",)),
    )
    assert _blocking(db, ("b", "z"), (60, 90)) == ["hold_1"]
    assert _blocking(db, ("z",), (60, 90)) == []


def test_blocking_and_stale_list_by_start_then_id(db: Db) -> None:
    # Not by id alone: a refusal lists its conflicts, and a preemption audits
    # its losers, in this order, on every store alike.
    early, late = at(60), at(70)
    gone = at(-1)
    _add(
        db,
        hold("hold_3", attendees=("a",), start=early),
        hold("hold_1", attendees=("b",), start=late),
        hold("hold_2", attendees=("c",), start=late),
        hold("hold_6", attendees=("d",), start=early, expires_at=gone),
        hold("hold_4", attendees=("e",), start=late, expires_at=gone),
        hold("hold_5", attendees=("f",), start=late, expires_at=gone),
    )
    everyone = ("a", "b", "c", "d", "e", "f")
    assert _blocking(db, everyone, (0, 120)) == ["hold_3", "hold_1", "hold_2"]
    assert _stale(db, everyone, (0, 120)) == ["hold_6", "hold_4", "hold_5"]


def test_stale_holds_are_held_ones_past_expiry_from_that_instant_on(db: Db) -> None:
    _add(
        db,
        hold("hold_1", attendees=("a",), expires_at=at(5)),
        hold("hold_2", attendees=("b",), expires_at=at(6)),
        hold("hold_3", attendees=("c",), status=HoldStatus.COMMITTED, expires_at=at(1)),
        hold("hold_4", attendees=("d",), status=HoldStatus.EXPIRED, expires_at=at(1)),
        hold("hold_5", tenant="other", attendees=("a",), expires_at=at(1)),
    )
    assert _stale(db, ("a", "b", "c", "d"), (60, 90), now=at(5)) == ["hold_1"]
    assert _stale(db, ("a",), (0, 60), now=at(5)) == []  # touching only


def test_what_a_claim_sees_does_not_depend_on_the_order_it_asks_in(db: Db) -> None:
    _add(db, hold("hold_1", attendees=("a",), expires_at=at(-1)), hold("hold_2", attendees=("b",)))

    def claim(uow: UnitOfWork) -> list[list[str]]:
        span = (["a", "b"], at(60), at(90), NOW)
        seen = [_ids(uow.holds.stale("acme", *span)), _ids(uow.holds.blocking("acme", *span))]
        stale = uow.holds.get("acme", "hold_1")
        assert stale is not None
        uow.holds.save(replace(stale, status=HoldStatus.EXPIRED))
        seen += [_ids(uow.holds.stale("acme", *span)), _ids(uow.holds.blocking("acme", *span))]
        uow.holds.add(hold("hold_3", attendees=("a",)))
        seen += [_ids(uow.holds.blocking("acme", *span)), _ids(uow.holds.stale("acme", *span))]
        return seen

    assert db.look(claim) == [["hold_1"], ["hold_2"], [], ["hold_2"], ["hold_2", "hold_3"], []]


def test_a_unit_of_work_entered_again_forgets_what_it_rolled_back(db: Db) -> None:
    def twice(uow: UnitOfWork) -> tuple[list[str], list[str]]:
        span = (["att_a"], at(60), at(90), NOW)
        with uow:
            uow.holds.add(hold("hold_1"))
            inside = _ids(uow.holds.blocking("acme", *span))
        with uow:  # no commit: the hold is gone, whatever was read of it
            after = _ids(uow.holds.blocking("acme", *span))
        return inside, after

    assert db.run(twice) == (["hold_1"], [])


def test_a_unit_of_work_entered_again_sees_what_was_committed_meanwhile(db: Db) -> None:
    def twice(uow: UnitOfWork) -> tuple[list[str], list[str]]:
        span = (["att_a"], at(60), at(90), NOW)
        with uow:
            before = _ids(uow.holds.stale("acme", *span))
            uow.holds.add(hold("hold_1", expires_at=at(-1)))
            uow.commit()
        with uow:
            after = _ids(uow.holds.stale("acme", *span))
        return before, after

    assert db.run(twice) == ([], ["hold_1"])


def test_a_hold_added_inactive_does_not_occupy_its_slot(db: Db) -> None:
    _add(db, hold("hold_1", status=HoldStatus.RELEASED))
    _add(db, hold("hold_2"))  # the same attendee and span, held
    assert _blocking(db, ("att_a",), (60, 90)) == ["hold_2"]


def test_live_intent_is_the_oldest_unexpired_or_committed_hold_of_that_workflow(db: Db) -> None:
    _add(
        db,
        hold("hold_1", attendees=("a",), expires_at=at(2)),
        hold("hold_2", attendees=("b",), status=HoldStatus.COMMITTED, expires_at=at(-60)),
        hold("hold_3", attendees=("c",)),
        hold("hold_4", attendees=("d",), workflow_id="other"),
        hold("hold_5", attendees=("e",), intent_fp="j" * 64),
        hold("hold_6", tenant="other", attendees=("f",)),
    )

    def live(now: float, tenant: str = "acme", workflow: str = "wf") -> str | None:
        def read(uow: UnitOfWork) -> str | None:
            found = uow.ledger.lookup_claim(tenant, "no-key", workflow, "i" * 64, (), at(now))
            return None if found.live is None else found.live.id

        return db.look(read)

    assert live(0) == "hold_1"
    assert live(2) == "hold_2"  # hold_1 expired exactly now
    assert live(0, workflow="other") == "hold_4"
    assert live(0, tenant="other") == "hold_6"
    assert live(0, tenant="nobody") is None


def test_due_for_expiry_lists_held_holds_past_expiry_oldest_expiry_first(db: Db) -> None:
    # The sweeper locks the tenant of the first one: the oldest overdue goes first.
    _add(
        db,
        hold("hold_1", attendees=("a",), expires_at=at(3)),
        hold("hold_2", attendees=("b",), tenant="other", expires_at=at(1)),
        hold("hold_3", attendees=("c",), expires_at=at(2)),
        hold("hold_4", attendees=("d",), expires_at=at(2)),
        hold("hold_5", attendees=("e",), expires_at=at(4)),
        hold("hold_6", attendees=("f",), status=HoldStatus.COMMITTED, expires_at=at(0)),
        hold("hold_7", attendees=("g",), status=HoldStatus.EXPIRED, expires_at=at(0)),
    )
    due = db.look(lambda uow: uow.holds.due_for_expiry(at(4), 10))
    assert _ids(due) == ["hold_2", "hold_3", "hold_4", "hold_1", "hold_5"]
    first = db.look(lambda uow: uow.holds.due_for_expiry(at(4), 2))
    assert _ids(first) == ["hold_2", "hold_3"]
    assert _ids(db.look(lambda uow: uow.holds.due_for_expiry(at(1), 10))) == ["hold_2"]
    assert (
        db.look(lambda uow: uow.holds.due_for_expiry(at(1) - timedelta(microseconds=1), 10)) == []
    )


def _spans(db: Db, attendees: tuple[str, ...], span: Span, now: datetime = NOW) -> list[Span]:
    start, end = at(span[0]), at(span[1])
    found = db.look(lambda uow: uow.holds.blocking_spans("acme", attendees, start, end, now))
    return [
        ((s - NOW) // timedelta(minutes=1), (e - NOW) // timedelta(minutes=1)) for s, e in found
    ]


def test_blocking_spans_are_the_spans_of_the_blocking_holds_each_once(db: Db) -> None:
    # What a refusal's search for alternatives avoids: exactly what ``blocking``
    # lists (a hold of two of the attendees once), by start then end.
    _add(
        db,
        hold("hold_1", attendees=("a", "b"), start=at(120), end=at(150), expires_at=at(10)),
        hold("hold_2", attendees=("a",), start=at(60), end=at(120), status=HoldStatus.COMMITTED,
             expires_at=at(-60)),
        hold("hold_3", attendees=("c",), start=at(60), end=at(90)),
        hold("hold_4", attendees=("a",), start=at(150), end=at(180), expires_at=at(5)),
        hold("hold_5", attendees=("b",), start=at(180), end=at(210), status=HoldStatus.RELEASED),
        hold("hold_6", tenant="other", attendees=("a",), start=at(210), end=at(240)),
        hold("hold_7", attendees=("b",), start=at(300), end=at(330)),
    )  # fmt: skip
    assert _spans(db, ("a", "b", "c"), (0, 300)) == [(60, 90), (60, 120), (120, 150), (150, 180)]
    assert _spans(db, ("a", "b"), (0, 300), now=at(5)) == [(60, 120), (120, 150)]
    assert _spans(db, ("b",), (150, 301)) == [(300, 330)]  # touching spans do not overlap
    assert _spans(db, ("z",), (0, 400)) == []
    everyone, window = ("a", "b", "c"), (at(0), at(400))
    held = db.look(lambda uow: uow.holds.blocking("acme", everyone, *window, NOW))
    assert _spans(db, everyone, (0, 400)) == sorted(
        ((h.start - NOW) // timedelta(minutes=1), (h.end - NOW) // timedelta(minutes=1))
        for h in held
    )


def test_blocking_spans_see_a_hold_as_long_as_allowed_from_its_last_microsecond(db: Db) -> None:
    end = at(60) + MAX_HOLD
    _add(db, hold("hold_1", start=at(60), end=end, expires_at=at(60 * 48)))
    last_us = end - timedelta(microseconds=1)
    found = db.look(
        lambda uow: uow.holds.blocking_spans("acme", ["att_a"], last_us, end + MAX_HOLD, NOW)
    )
    assert found == [(at(60), end)]
