"""Sessions: dashboard sign-ins by the hash of their token, removed once, purged when over."""

from __future__ import annotations

from datetime import datetime

import pytest
from sqlalchemy.exc import IntegrityError

from slotward.engine.approvals import Session
from slotward.engine.ports import UnitOfWork
from tests.contract.conftest import Db
from tests.contract.values import at, session


def _get(db: Db, token_hash: str) -> Session | None:
    return db.look(lambda uow: uow.sessions.get(token_hash))


def _add(db: Db, *sessions: Session) -> None:
    def add(uow: UnitOfWork) -> None:
        for s in sessions:
            uow.sessions.add(s)

    db.commit(add)


def test_a_session_reads_back_as_added_in_its_unit_of_work_and_after(db: Db) -> None:
    added = session("a" * 64, expires_at=at(60, us=7))

    def add(uow: UnitOfWork) -> Session | None:
        uow.sessions.add(added)
        return uow.sessions.get("a" * 64)

    assert db.commit(add) == added
    assert _get(db, "a" * 64) == added
    assert _get(db, "b" * 64) is None


def test_each_session_stands_for_its_own_tenants_key(db: Db) -> None:
    # Read by the token's hash alone: what it names is the key of its tenant.
    ours, theirs = session("a" * 64), session("b" * 64, tenant="other")
    _add(db, ours, theirs)
    assert [_get(db, "a" * 64), _get(db, "b" * 64)] == [ours, theirs]


def test_an_expired_session_is_still_read_the_caller_judges(db: Db) -> None:
    over = session("a" * 64, expires_at=at(-1))
    _add(db, over)
    assert _get(db, "a" * 64) == over


def test_a_token_hash_is_stored_once(db: Db) -> None:
    _add(db, session("a" * 64))
    with pytest.raises((KeyError, IntegrityError)):
        _add(db, session("a" * 64, tenant="other"))
    assert _get(db, "a" * 64) == session("a" * 64)


def test_a_session_is_removed_once_and_the_others_stay(db: Db) -> None:
    _add(db, session("a" * 64), session("b" * 64, tenant="other"))
    assert db.commit(lambda uow: uow.sessions.remove("a" * 64)) is True
    assert db.commit(lambda uow: uow.sessions.remove("a" * 64)) is False
    assert db.commit(lambda uow: uow.sessions.remove("c" * 64)) is False
    assert _get(db, "a" * 64) is None
    assert _get(db, "b" * 64) == session("b" * 64, tenant="other")


def test_purge_deletes_up_to_the_limit_of_sessions_over_at_that_instant(db: Db) -> None:
    _add(
        db,
        session("a" * 64, expires_at=at(3)),
        session("b" * 64, expires_at=at(1), tenant="other"),
        session("c" * 64, expires_at=at(2)),
        session("d" * 64, expires_at=at(2, us=1)),
    )

    def purge(now: datetime, limit: int) -> int:
        return db.commit(lambda uow: uow.sessions.purge(now, limit))

    def left() -> list[bool]:
        return [_get(db, h * 64) is not None for h in "abcd"]

    assert purge(at(1, us=-1), 10) == 0
    assert purge(at(2), 1) == 1  # the one over first, whatever its tenant
    assert left() == [True, False, True, True]
    assert purge(at(2), 10) == 1  # over at its expiry exactly
    assert left() == [True, False, False, True]
    assert purge(at(60), 10) == 2
    assert left() == [False] * 4
    assert purge(at(60), 10) == 0


def test_sessions_not_committed_are_gone(db: Db) -> None:
    _add(db, session("a" * 64, expires_at=at(-1)))

    def change(uow: UnitOfWork) -> None:
        uow.sessions.add(session("b" * 64))
        uow.sessions.remove("a" * 64)

    db.look(change)
    assert _get(db, "b" * 64) is None
    assert _get(db, "a" * 64) == session("a" * 64, expires_at=at(-1))
    db.look(lambda uow: uow.sessions.purge(at(0), 10))
    assert _get(db, "a" * 64) is not None
