"""Calendar writes: one row per hold and attendee, a newer version replaces an
older one, claimed when due, saved, counted, purged once written and over."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from slotward.engine.calendars import CalendarWrite
from tests.contract.calendar_values import write
from tests.contract.conftest import Db
from tests.contract.values import NOW, at

KEY = ("acme", "hold_1", "att_a")


def _enqueue(db: Db, *writes: CalendarWrite) -> None:
    db.commit(lambda uow: uow.calendar_writes.enqueue(list(writes)))


def _get(db: Db, key: tuple[str, str, str] = KEY) -> CalendarWrite | None:
    found = db.look(lambda uow: uow.calendar_writes.get_many([key]))
    assert len(found) <= 1
    return found[0] if found else None


def _claim(db: Db, owner: str = "writer-a", now: float = 0, limit: int = 10) -> list[str]:
    claimed = db.commit(lambda uow: uow.calendar_writes.claim(owner, at(now), at(now + 5), limit))
    return [f"{w.hold_id}/{w.attendee}" for w in claimed]


def _save(db: Db, *writes: CalendarWrite) -> None:
    db.commit(lambda uow: uow.calendar_writes.save_many(list(writes)))


def _delivered(w: CalendarWrite, written: float = 0) -> CalendarWrite:
    return replace(w, state="delivered", attempts=1, written_at=at(written))


def _deleting(hold_id: str, **changes: Any) -> CalendarWrite:
    """A write of a hold that is over: its event deleted."""
    return write(hold_id, action="delete", status=None, **changes)


def test_a_write_reads_back_as_written(db: Db) -> None:
    written = write(
        status=None, action="delete", claim_owner="writer-a", claim_until=at(5),
        written_at=at(-1), last_error="HTTP 503", attempts=2, state="dead",
    )  # fmt: skip
    _enqueue(db, written, write("hold_2"))
    assert _get(db) == written
    assert _get(db, ("acme", "hold_2", "att_a")) == write("hold_2")
    assert _get(db, ("other", "hold_1", "att_a")) is None


def test_a_higher_version_replaces_the_row_pending_again_its_claim_kept(db: Db) -> None:
    _enqueue(db, write())
    db.commit(lambda uow: uow.calendar_writes.claim("writer-a", NOW, at(5), 10))
    _save(db, replace(write(), state="dead", attempts=7, claim_owner="writer-a",
                      claim_until=at(5), last_error="HTTP 500", written_at=at(1)))  # fmt: skip

    newer = write(
        version=3, action="delete", status=None, summary="Sync (cancelled)", start=at(61),
        end=at(91), due=2, updated_at=at(2), claim_owner="someone", claim_until=at(99),
    )  # fmt: skip
    _enqueue(db, newer)
    assert _get(db) == replace(newer, claim_owner="writer-a", claim_until=at(5))


def test_a_replaced_delivered_write_is_pending_with_attempts_zero(db: Db) -> None:
    _enqueue(db, _delivered(write()))
    _enqueue(db, write(version=2, status="CONFIRMED"))
    assert _get(db) == write(version=2, status="CONFIRMED")
    assert _claim(db) == ["hold_1/att_a"]


def test_a_lower_or_equal_version_is_ignored(db: Db) -> None:
    _enqueue(db, _delivered(write(version=2)))
    _enqueue(db, write(version=1, summary="older"), write(version=2, summary="the same again"))
    assert _get(db) == _delivered(write(version=2))
    assert _claim(db) == []


def test_a_batch_with_a_hold_twice_ends_with_its_highest_version(db: Db) -> None:
    _enqueue(
        db,
        write(version=2),
        write(version=4, summary="first of the highest"),
        write(version=3),
        write(version=4, summary="second of the highest"),
        write("hold_2"),
    )
    assert _get(db) == write(version=4, summary="first of the highest")
    assert _get(db, ("acme", "hold_2", "att_a")) == write("hold_2")


def test_writes_of_one_hold_to_other_attendees_are_rows_apart(db: Db) -> None:
    _enqueue(db, write(attendee="att_a"), write(attendee="att_b", version=1))
    _enqueue(db, write(attendee="att_b", version=2))
    assert _get(db) == write()
    assert _get(db, ("acme", "hold_1", "att_b")) == write(attendee="att_b", version=2)


def test_pending_writes_due_are_claimed_soonest_first(db: Db) -> None:
    _enqueue(
        db,
        write("hold_late", due=-1),
        write("hold_soon", due=-5),
        write("hold_now", due=0),  # due at its instant
        write("hold_b", "att_b", due=-5),  # the same instant: by key
        write("hold_later", due=1),  # not yet
        write("hold_done", state="delivered", due=-9),
        write("hold_dead", state="dead", due=-9),
    )
    assert _claim(db) == ["hold_b/att_b", "hold_soon/att_a", "hold_late/att_a", "hold_now/att_a"]


def test_a_claim_is_saved_and_holds_until_it_is_over(db: Db) -> None:
    _enqueue(db, write())
    [claimed] = db.commit(lambda uow: uow.calendar_writes.claim("writer-a", NOW, at(5), 10))
    assert claimed == replace(write(), claim_owner="writer-a", claim_until=at(5))
    assert _get(db) == claimed
    assert _claim(db, "writer-b", now=4) == []
    assert _claim(db, "writer-b", now=5) == ["hold_1/att_a"]  # over at its until
    assert _get(db) == replace(write(), claim_owner="writer-b", claim_until=at(10))


def test_claims_take_at_most_the_limit_and_then_the_rest(db: Db) -> None:
    _enqueue(db, *(write(f"hold_{i}", due=-10 + i) for i in range(5)))
    assert _claim(db, limit=2) == ["hold_0/att_a", "hold_1/att_a"]
    assert _claim(db, "writer-b") == ["hold_2/att_a", "hold_3/att_a", "hold_4/att_a"]


def test_get_many_reads_the_keys_that_exist_and_no_others(db: Db) -> None:
    _enqueue(
        db,
        write("hold_1", "att_a"),
        write("hold_2", "att_b"),
        write("hold_1", "att_b"),  # of a hold and an attendee asked for, not a key asked for
        write("hold_1", "att_a", tenant="other"),
    )
    keys = [("acme", "hold_1", "att_a"), ("acme", "hold_2", "att_b"), ("acme", "hold_9", "att_a"),
            ("other", "hold_1", "att_a")]  # fmt: skip
    found = db.look(lambda uow: uow.calendar_writes.get_many(keys))
    assert sorted(w.key for w in found) == sorted(k for k in keys if k[1] != "hold_9")
    assert db.look(lambda uow: uow.calendar_writes.get_many([])) == []


def test_save_many_writes_back_the_mutable_fields_of_the_version_read(db: Db) -> None:
    _enqueue(db, write(), write("hold_2"))
    done = replace(
        write(version=1, summary="not written back", start=at(0)),
        state="delivered", attempts=3, next_attempt_at=at(7), claim_owner=None,
        claim_until=None, written_at=at(6), last_error="was 503",
    )  # fmt: skip
    retry = replace(write("hold_2"), attempts=1, next_attempt_at=at(3), claim_owner="writer-a",
                    claim_until=at(5), last_error="timeout")  # fmt: skip
    _save(db, done, retry, write("hold_gone"))
    assert _get(db) == replace(
        write(version=1),
        state="delivered", attempts=3, next_attempt_at=at(7), written_at=at(6),
        last_error="was 503",
    )  # fmt: skip
    assert _get(db, ("acme", "hold_2", "att_a")) == retry
    assert _get(db, ("acme", "hold_gone", "att_a")) is None


def test_save_many_leaves_a_row_a_newer_version_replaced(db: Db) -> None:
    """A writer records version 1 while the relay has queued version 2 (a delete
    after a release): the newer state must not be marked written."""
    _enqueue(db, write())
    _enqueue(db, write(version=2, action="delete", status=None))
    done = replace(write(version=1), state="delivered", written_at=at(6), attempts=1)
    _save(db, done)
    assert _get(db) == write(version=2, action="delete", status=None)


def test_revive_puts_the_attendees_dead_writes_back_to_pending(db: Db) -> None:
    _enqueue(
        db,
        write("hold_1", state="dead", attempts=9, last_error="503"),
        _delivered(write("hold_2")),
        write("hold_3", attendee="att_b", state="dead"),
    )
    assert db.commit(lambda uow: uow.calendar_writes.revive("acme", "att_a", at(3))) == 1
    revived = _get(db, ("acme", "hold_1", "att_a"))
    assert revived is not None
    assert (revived.state, revived.attempts, revived.next_attempt_at) == ("pending", 0, at(3))
    assert revived.claim_owner is None
    other = _get(db, ("acme", "hold_3", "att_b"))
    assert other is not None
    assert other.state == "dead"  # another attendee's
    delivered = _get(db, ("acme", "hold_2", "att_a"))
    assert delivered is not None
    assert delivered.state == "delivered"


def test_counts_are_the_attendees_writes_by_state(db: Db) -> None:
    _enqueue(
        db,
        write("hold_1"),
        write("hold_2"),
        _delivered(write("hold_3")),
        write("hold_4", attendee="att_b", state="dead"),
        write("hold_5", tenant="other", state="dead"),
    )
    assert db.look(lambda uow: uow.calendar_writes.counts("acme", "att_a")) == {
        "pending": 2,
        "delivered": 1,
    }
    assert db.look(lambda uow: uow.calendar_writes.counts("acme", "att_c")) == {}


def test_remove_for_attendee_deletes_its_writes_alone(db: Db) -> None:
    _enqueue(
        db,
        write("hold_1"),
        _delivered(write("hold_2")),
        write("hold_1", attendee="att_b"),
        write("hold_1", tenant="other"),
    )
    assert db.commit(lambda uow: uow.calendar_writes.remove_for_attendee("acme", "att_a")) == 2
    assert _get(db) is None
    assert _get(db, ("acme", "hold_1", "att_b")) == write(attendee="att_b")
    assert _get(db, ("other", "hold_1", "att_a")) == write(tenant="other")
    assert db.commit(lambda uow: uow.calendar_writes.remove_for_attendee("acme", "att_a")) == 0


def test_purge_deletes_delivered_deletes_written_before_oldest_first(db: Db) -> None:
    _enqueue(
        db,
        _delivered(_deleting("hold_old"), written=-30),
        _delivered(_deleting("hold_older"), written=-40),
        _delivered(_deleting("hold_oldest", tenant="other"), written=-50),
        _delivered(_deleting("hold_recent"), written=-10),  # not before
        _delivered(_deleting("hold_at"), written=-20),  # at: not before
        _delivered(write("hold_put"), written=-60),  # its hold is not over
        _deleting("hold_pending"),  # not yet written
        replace(_deleting("hold_dead"), state="dead", written_at=at(-60)),
    )
    assert db.commit(lambda uow: uow.calendar_writes.purge_written(at(-20), 2)) == 2
    assert _get(db, ("other", "hold_oldest", "att_a")) is None
    assert _get(db, ("acme", "hold_older", "att_a")) is None
    assert _get(db, ("acme", "hold_old", "att_a")) is not None
    assert db.commit(lambda uow: uow.calendar_writes.purge_written(at(-20), 10)) == 1
    assert db.commit(lambda uow: uow.calendar_writes.purge_written(at(-20), 10)) == 0
    left = db.look(lambda uow: uow.calendar_writes.counts("acme", "att_a"))
    assert left == {"delivered": 3, "pending": 1, "dead": 1}  # recent, at, put


def test_changes_not_committed_were_never_made(db: Db) -> None:
    _enqueue(db, _delivered(write(action="delete", status=None), written=-10))
    before = _get(db)
    db.look(lambda uow: uow.calendar_writes.enqueue([write(version=2), write("hold_2")]))
    db.look(lambda uow: uow.calendar_writes.save_many([replace(write(), state="dead")]))
    db.look(lambda uow: uow.calendar_writes.remove_for_attendee("acme", "att_a"))
    db.look(lambda uow: uow.calendar_writes.purge_written(NOW, 10))
    assert _get(db) == before
    assert _get(db, ("acme", "hold_2", "att_a")) is None
    _enqueue(db, write("hold_3"))
    db.look(lambda uow: uow.calendar_writes.claim("writer-a", NOW, at(5), 10))
    assert _claim(db, "writer-b") == ["hold_3/att_a"]
