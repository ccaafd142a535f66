"""AuditLog: each tenant's chain, its head, its entries by seq, and the tenants that have one."""

from __future__ import annotations

import pytest
from sqlalchemy.exc import IntegrityError

from slotward.engine.model import AuditEntry
from slotward.engine.ports import UnitOfWork
from slotward.engine.rules.audit import GENESIS
from tests.contract.conftest import Db
from tests.contract.values import entry


def _append(db: Db, *entries: AuditEntry) -> None:
    def append(uow: UnitOfWork) -> None:
        for e in entries:
            uow.audit.append(e)

    db.commit(append)


def test_an_empty_chain_starts_at_genesis(db: Db) -> None:
    assert db.look(lambda uow: uow.audit.head("acme")) == (0, GENESIS)
    assert db.look(lambda uow: uow.audit.entries("acme", 0, 10)) == []
    assert db.look(lambda uow: uow.audit.tenants()) == []


def test_the_head_follows_each_append_in_its_unit_of_work_and_after(db: Db) -> None:
    def append(uow: UnitOfWork) -> list[tuple[int, str]]:
        heads = []
        for seq in (1, 2):
            uow.audit.append(entry(seq))
            heads.append(uow.audit.head("acme"))
        return heads

    assert db.commit(append) == [(1, entry(1).hash), (2, entry(2).hash)]
    _append(db, entry(3))
    assert db.look(lambda uow: uow.audit.head("acme")) == (3, entry(3).hash)
    assert db.look(lambda uow: uow.audit.head("other")) == (0, GENESIS)


def test_entries_come_by_seq_after_the_one_given(db: Db) -> None:
    _append(db, *(entry(seq) for seq in range(1, 6)))
    _append(db, entry(1, tenant="other"))

    def seqs(after: int, limit: int, tenant: str = "acme") -> list[int]:
        return [e.seq for e in db.look(lambda uow: uow.audit.entries(tenant, after, limit))]

    assert db.look(lambda uow: uow.audit.entries("acme", 0, 10)) == [
        entry(seq) for seq in range(1, 6)
    ]
    assert seqs(0, 2) == [1, 2]
    assert seqs(2, 2) == [3, 4]
    assert seqs(4, 2) == [5]
    assert seqs(5, 2) == []
    assert seqs(0, 10, tenant="other") == [1]


def test_the_tenants_with_a_chain_in_order(db: Db) -> None:
    _append(db, entry(1, tenant="zeta"), entry(1, tenant="acme"), entry(1, tenant="mid"))
    assert db.look(lambda uow: uow.audit.tenants()) == ["acme", "mid", "zeta"]


def test_a_seq_is_appended_once_per_tenant(db: Db) -> None:
    _append(db, entry(1), entry(2))
    with pytest.raises((KeyError, IntegrityError)):
        _append(db, entry(2, prev="x" * 64))
    assert db.look(lambda uow: uow.audit.head("acme")) == (2, entry(2).hash)
    assert db.look(lambda uow: uow.audit.entries("acme", 0, 10)) == [entry(1), entry(2)]


def test_entries_not_committed_are_gone(db: Db) -> None:
    _append(db, entry(1))
    db.look(lambda uow: uow.audit.append(entry(2)))
    assert db.look(lambda uow: uow.audit.head("acme")) == (1, entry(1).hash)
    assert db.look(lambda uow: uow.audit.entries("acme", 0, 10)) == [entry(1)]
