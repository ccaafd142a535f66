"""Leases: one holder at a time; renewed by its holder, free once over or dropped."""

from __future__ import annotations

from tests.contract.conftest import Db
from tests.contract.values import at


def _take(db: Db, owner: str, now: int, until: int, name: str = "relay") -> bool:
    return db.commit(lambda uow: uow.leases.take(name, owner, at(now), at(until)))


def test_a_free_lease_is_taken_and_refused_to_another_until_over(db: Db) -> None:
    assert _take(db, "proc-a", 0, 5)
    assert not _take(db, "proc-b", 1, 6)
    assert not _take(db, "proc-b", 4, 9)
    assert _take(db, "proc-b", 5, 10)  # over at its until
    assert not _take(db, "proc-a", 6, 11)


def test_the_holder_renews_it(db: Db) -> None:
    assert _take(db, "proc-a", 0, 5)
    assert _take(db, "proc-a", 4, 9)
    assert not _take(db, "proc-b", 8, 12)  # the renewal counts
    assert _take(db, "proc-b", 9, 12)


def test_leases_of_other_names_are_apart(db: Db) -> None:
    assert _take(db, "proc-a", 0, 5)
    assert _take(db, "proc-b", 0, 5, name="purge")


def test_a_dropped_lease_is_free_and_only_its_holder_drops_it(db: Db) -> None:
    assert _take(db, "proc-a", 0, 5)
    db.commit(lambda uow: uow.leases.drop("relay", "proc-b"))
    assert not _take(db, "proc-b", 1, 6)
    db.commit(lambda uow: uow.leases.drop("relay", "proc-a"))
    assert _take(db, "proc-b", 1, 6)
    db.commit(lambda uow: uow.leases.drop("never", "proc-a"))  # nothing to drop: no error


def test_a_take_not_committed_was_never_made(db: Db) -> None:
    db.look(lambda uow: uow.leases.take("relay", "proc-a", at(0), at(5)))
    assert _take(db, "proc-b", 1, 6)
