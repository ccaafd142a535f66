"""ApiKeys: a key found by hash or id until revoked; a rehash is a compare-and-set."""

from __future__ import annotations

import pytest
from sqlalchemy.exc import IntegrityError

from slotward.engine.model import Principal
from slotward.engine.ports import UnitOfWork
from tests.contract.conftest import Db
from tests.contract.values import NOW

AGENT = Principal("acme", "agent-1", "agent", 50)
ADMIN = Principal("other", "root", "admin", 100)


def _add(db: Db, key_id: str, key_hash: str, principal: Principal = AGENT) -> None:
    db.commit(lambda uow: uow.keys.add(key_id, key_hash, principal, NOW))


def _find(db: Db, key_hash: str) -> Principal | None:
    return db.look(lambda uow: uow.keys.find(key_hash))


def _by_id(db: Db, key_id: str) -> tuple[str, Principal] | None:
    return db.look(lambda uow: uow.keys.by_id(key_id))


def test_a_key_is_found_by_hash_and_by_id_in_its_unit_of_work_and_after(db: Db) -> None:
    def add(uow: UnitOfWork) -> tuple[Principal | None, tuple[str, Principal] | None]:
        uow.keys.add("key_1", "h1", AGENT, NOW)
        return uow.keys.find("h1"), uow.keys.by_id("key_1")

    assert db.commit(add) == (AGENT, ("h1", AGENT))
    _add(db, "key_2", "h2", ADMIN)
    assert [_find(db, "h1"), _find(db, "h2"), _find(db, "h3")] == [AGENT, ADMIN, None]
    assert [_by_id(db, "key_1"), _by_id(db, "key_3")] == [("h1", AGENT), None]


def test_a_revoked_key_is_found_no_more_and_revoked_once(db: Db) -> None:
    _add(db, "key_1", "h1")
    _add(db, "key_2", "h2")
    assert db.commit(lambda uow: uow.keys.revoke("key_1", NOW)) is True
    assert [_find(db, "h1"), _by_id(db, "key_1")] == [None, None]
    assert db.commit(lambda uow: uow.keys.revoke("key_1", NOW)) is False
    assert db.commit(lambda uow: uow.keys.revoke("key_9", NOW)) is False
    assert db.commit(lambda uow: uow.keys.rehash("key_1", "h1", "h1b")) is False
    assert _find(db, "h1b") is None
    assert _by_id(db, "key_2") == ("h2", AGENT)


def test_a_rehash_replaces_the_hash_only_if_it_is_still_the_old_one(db: Db) -> None:
    _add(db, "key_1", "h1")
    assert db.commit(lambda uow: uow.keys.rehash("key_1", "stale", "h1c")) is False
    assert db.commit(lambda uow: uow.keys.rehash("key_1", "h1", "h1b")) is True
    assert [_find(db, "h1"), _find(db, "h1b"), _by_id(db, "key_1")] == [None, AGENT, ("h1b", AGENT)]
    assert db.commit(lambda uow: uow.keys.rehash("key_1", "h1", "h1c")) is False
    assert db.commit(lambda uow: uow.keys.rehash("key_9", "h1b", "h1c")) is False
    assert _by_id(db, "key_1") == ("h1b", AGENT)


@pytest.mark.parametrize(("key_id", "key_hash"), [("key_1", "h2"), ("key_2", "h1")])
def test_a_key_id_and_a_hash_are_stored_once(db: Db, key_id: str, key_hash: str) -> None:
    _add(db, "key_1", "h1")
    with pytest.raises((KeyError, IntegrityError)):
        _add(db, key_id, key_hash, ADMIN)
    assert [_find(db, "h1"), _by_id(db, "key_1")] == [AGENT, ("h1", AGENT)]
    assert [_find(db, "h2"), _by_id(db, "key_2")] == [None, None]


@pytest.mark.parametrize(("key_id", "key_hash"), [("key_1", "h2"), ("key_2", "h1")])
def test_a_revoked_key_keeps_its_id_and_hash(db: Db, key_id: str, key_hash: str) -> None:
    # Revoked keys stay on record (their id names them in the audit and the CLI).
    _add(db, "key_1", "h1")
    db.commit(lambda uow: uow.keys.revoke("key_1", NOW))
    with pytest.raises((KeyError, IntegrityError)):
        _add(db, key_id, key_hash)
    assert [_by_id(db, "key_1"), _by_id(db, "key_2"), _find(db, "h1")] == [None, None, None]


def test_key_changes_not_committed_are_gone(db: Db) -> None:
    _add(db, "key_1", "h1")

    def change(uow: UnitOfWork) -> None:
        uow.keys.add("key_2", "h2", AGENT, NOW)
        uow.keys.rehash("key_1", "h1", "h1b")

    db.look(change)
    db.look(lambda uow: uow.keys.revoke("key_1", NOW))
    assert [_find(db, "h1"), _find(db, "h1b"), _find(db, "h2")] == [AGENT, None, None]
