"""The audit hash chain: ``verify_chain`` accepts a chain and finds where it breaks."""

from __future__ import annotations

import itertools
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from slotward.engine.fakes import InMemoryUnitOfWork, State
from slotward.engine.model import AuditEntry, Principal
from slotward.engine.rules.audit import GENESIS, entry_hash, next_entry, verify_chain
from slotward.engine.usecases.reads import verify_audit

T0 = datetime(2030, 10, 1, 9, 0, tzinfo=UTC)
TENANT = "acme"


def build_chain(length: int = 6) -> list[AuditEntry]:
    chain: list[AuditEntry] = []
    head = (0, GENESIS)
    for i in range(length):
        entry = next_entry(
            head,
            tenant=TENANT,
            at=T0 + timedelta(seconds=i),
            actor="agent-a" if i % 2 else "system",
            action="hold.create" if i % 3 else "hold.expire",
            key=f"idem_{i}" if i % 3 else None,
            hold_id=f"hold_{i}",
            outcome="fresh",
        )
        chain.append(entry)
        head = (entry.seq, entry.hash)
    return chain


def test_a_built_chain_verifies() -> None:
    chain = build_chain()
    check = verify_chain(chain)
    assert check.ok
    assert check.count == len(chain)
    assert check.head == chain[-1].hash
    assert check.broken_at is None
    assert [e.seq for e in chain] == [1, 2, 3, 4, 5, 6]
    assert chain[0].prev_hash == GENESIS
    assert all(b.prev_hash == a.hash for a, b in itertools.pairwise(chain))


def test_an_empty_chain_verifies_to_genesis() -> None:
    check = verify_chain([])
    assert (check.ok, check.count, check.head) == (True, 0, GENESIS)


def test_a_chain_verifies_from_a_known_head() -> None:
    chain = build_chain()
    check = verify_chain(chain[3:], (chain[2].seq, chain[2].hash))
    assert check.ok
    assert check.count == 3
    assert check.head == chain[-1].hash


def test_a_tail_does_not_verify_from_genesis() -> None:
    chain = build_chain()
    check = verify_chain(chain[3:])
    assert not check.ok
    assert check.broken_at == 4


@pytest.mark.parametrize(
    "change",
    [
        {"actor": "agent-evil"},
        {"action": "hold.release"},
        {"outcome": "conflict"},
        {"key": "idem_other"},
        {"hold_id": "hold_other"},
        {"at": T0 + timedelta(hours=1)},
        {"tenant": "globex"},
    ],
    ids=lambda change: next(iter(change)),
)
def test_a_changed_field_is_detected(change: dict[str, object]) -> None:
    chain = build_chain()
    chain[2] = replace(chain[2], **change)  # type: ignore[arg-type]
    check = verify_chain(chain)
    assert not check.ok
    assert check.broken_at == 3
    assert check.count == 2
    assert check.head == chain[1].hash


def test_a_changed_entry_with_a_recomputed_hash_breaks_the_next_link() -> None:
    chain = build_chain()
    forged = replace(chain[2], outcome="conflict")
    chain[2] = replace(forged, hash=entry_hash(forged))
    check = verify_chain(chain)
    assert not check.ok
    assert check.broken_at == 4


def test_a_removed_entry_is_detected() -> None:
    chain = build_chain()
    del chain[2]
    check = verify_chain(chain)
    assert not check.ok
    assert check.broken_at == 4
    assert check.count == 2


def test_a_removed_last_entry_is_not_a_break_of_what_remains() -> None:
    # The chain alone cannot tell a truncated tail; the head it reports can.
    chain = build_chain()
    check = verify_chain(chain[:-1])
    assert check.ok
    assert check.head != chain[-1].hash


def test_a_reordered_pair_is_detected() -> None:
    chain = build_chain()
    chain[2], chain[3] = chain[3], chain[2]
    check = verify_chain(chain)
    assert not check.ok
    assert check.broken_at == 4
    assert check.count == 2


def test_a_wrong_prev_hash_is_detected() -> None:
    chain = build_chain()
    chain[3] = replace(chain[3], prev_hash="f" * 64)
    check = verify_chain(chain)
    assert not check.ok
    assert check.broken_at == 4
    assert check.count == 3


def test_a_renumbered_entry_is_detected() -> None:
    chain = build_chain()
    chain[4] = replace(chain[4], seq=9)
    check = verify_chain(chain)
    assert not check.ok
    assert check.broken_at == 9


def test_a_wrong_hash_on_the_first_entry_is_detected() -> None:
    chain = build_chain()
    chain[0] = replace(chain[0], hash="0" * 64)
    check = verify_chain(chain)
    assert (check.ok, check.broken_at, check.count, check.head) == (False, 1, 0, GENESIS)


@pytest.mark.parametrize("batch", [1, 2, 4, 5, 100])
def test_verify_audit_walks_the_whole_chain_in_batches(batch: int) -> None:
    state = State(audit={TENANT: build_chain(5)})
    principal = Principal(TENANT, "ops", "admin", 0)
    result = verify_audit(InMemoryUnitOfWork(state), principal, batch=batch)
    assert result == {"ok": True, "count": 5, "head": state.audit[TENANT][-1].hash}


@pytest.mark.parametrize("batch", [1, 2, 3, 100])
def test_verify_audit_reports_where_a_stored_chain_breaks(batch: int) -> None:
    chain = build_chain(5)
    chain[3] = replace(chain[3], outcome="conflict")
    state = State(audit={TENANT: chain})
    principal = Principal(TENANT, "ops", "admin", 0)
    result = verify_audit(InMemoryUnitOfWork(state), principal, batch=batch)
    assert result["ok"] is False
    assert result["broken_at"] == 4
    assert result["count"] == 3
