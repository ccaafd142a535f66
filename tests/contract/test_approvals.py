"""Approvals: one per hold commit, a tenant's own, read as they stand at a given instant.

What the approvals use cases, the sweeper and the long-poll waiters rely on:
an approval reads back as written (its evidence as JSON makes it, whatever
the kind), a second approval of a hold is refused, a pending approval past
its expiry lists as expired (swept or not), the sweeper's queue spans every
tenant, and the tenant's approval policy is replaced whole.
"""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime
from typing import Any

import pytest
from sqlalchemy.exc import IntegrityError

from slotward.engine.approvals import Approval, ApprovalRules, ApprovalStatus
from slotward.engine.ports import UnitOfWork
from tests.contract.conftest import Db
from tests.contract.values import NOW, approval, at

PENDING, APPROVED = ApprovalStatus.PENDING, ApprovalStatus.APPROVED
DENIED, EXPIRED = ApprovalStatus.DENIED, ApprovalStatus.EXPIRED


def _add(db: Db, *approvals: Approval) -> None:
    def add(uow: UnitOfWork) -> None:
        for a in approvals:
            uow.approvals.add(a)

    db.commit(add)


def _get(db: Db, approval_id: str, tenant: str = "acme") -> Approval | None:
    return db.look(lambda uow: uow.approvals.get(tenant, approval_id))


def test_an_approval_reads_back_as_added_in_its_unit_of_work_and_after(db: Db) -> None:
    added = approval(
        "appr_1", hold_id="hold_1", hold_expires_at=at(5, us=3), expires_at=at(60, us=1),
        action={"type": "hold.commit", "hold_id": "hold_1"}, audit_seq=2**40,
    )  # fmt: skip
    bare = approval("appr_2", workflow_id=None, action=None, evidence=None)

    def add(uow: UnitOfWork) -> list[Approval | None]:
        uow.approvals.add(added)
        uow.approvals.add(bare)
        return [uow.approvals.get("acme", "appr_1"), uow.approvals.get("acme", "appr_2")]

    assert db.commit(add) == [added, bare]
    assert [_get(db, "appr_1"), _get(db, "appr_2")] == [added, bare]
    assert _get(db, "appr_1", tenant="other") is None
    assert _get(db, "appr_3") is None


EVIDENCE: list[Any] = [
    {"order": 8812, "lines": [{"sku": "A-1", "qty": 2}], "meta": {"a": {"b": {"c": [None]}}}},
    {"z": 1, "a": 2, "m": 3},  # keys kept in the order they came
    "Zoë ☕ 日本語 مرحبا 🧾",
    "\ud800 a lone surrogate, \u0000 a NUL, \u2028 a line separator",
    [0.1, 1.0, -0.0, 1e-300, 1.7976931348623157e308, 2.5e-7, 123456789.125],
    [2**63 + 1, -(2**70), 0],
    [True, False, None, "", [], {}],
    None,
    3.14,
    "null",
]


def test_evidence_of_every_json_kind_reads_back_as_json_makes_it(db: Db) -> None:
    added = [
        approval(f"appr_{i}", evidence=e, action={"type": "x", "e": e})
        for i, e in enumerate(EVIDENCE)
    ]
    _add(db, *added)
    for a in added:
        found = _get(db, a.id)
        assert found is not None
        expected = json.loads(json.dumps(a.evidence))
        assert found.evidence == expected
        # Exactly: no int turned float or back, no key reordered.
        assert json.dumps(found.evidence) == json.dumps(expected)
        assert json.dumps(found.action) == json.dumps({"type": "x", "e": expected})


def test_a_hold_has_one_approval_and_a_second_is_refused(db: Db) -> None:
    first = approval("appr_1", hold_id="hold_1")
    _add(db, first)
    with pytest.raises((KeyError, IntegrityError)):
        db.commit(lambda uow: uow.approvals.add(approval("appr_2", hold_id="hold_1")))
    assert _get(db, "appr_2") is None
    assert db.look(lambda uow: uow.approvals.for_hold("acme", "hold_1")) == first
    # Approvals of no hold are as many as asked; another hold has its own.
    _add(db, approval("appr_3"), approval("appr_4"), approval("appr_5", hold_id="hold_2"))
    assert [_get(db, i) is not None for i in ("appr_3", "appr_4", "appr_5")] == [True] * 3


def test_the_refused_add_is_rolled_back_and_the_unit_of_work_goes_on(db: Db) -> None:
    _add(db, approval("appr_1", hold_id="hold_1"))

    def twice(uow: UnitOfWork) -> str:
        with uow:
            uow.approvals.add(approval("appr_2"))
            try:
                uow.approvals.add(approval("appr_3", hold_id="hold_1"))
            except (KeyError, IntegrityError):
                pass  # left without a commit: rolled back, appr_2 with it
            else:
                raise AssertionError("a second approval of hold_1 was accepted")
        with uow:
            uow.approvals.add(approval("appr_4", hold_id="hold_2"))
            uow.commit()
        return "done"

    assert db.run(twice) == "done"
    found = [_get(db, i) is not None for i in ("appr_1", "appr_2", "appr_3", "appr_4")]
    assert found == [True, False, False, True]


def test_an_approval_id_is_stored_once_whatever_the_tenant(db: Db) -> None:
    _add(db, approval("appr_1"))
    with pytest.raises((KeyError, IntegrityError)):
        db.commit(lambda uow: uow.approvals.add(approval("appr_1", tenant="other")))
    assert _get(db, "appr_1", tenant="other") is None


def test_for_hold_finds_the_approval_of_that_hold_in_its_tenant_only(db: Db) -> None:
    _add(db, approval("appr_1", hold_id="hold_1"), approval("appr_2", hold_id="hold_2"))

    def of(hold_id: str, tenant: str = "acme") -> str | None:
        found = db.look(lambda uow: uow.approvals.for_hold(tenant, hold_id))
        return None if found is None else found.id

    assert [of("hold_1"), of("hold_2"), of("hold_3")] == ["appr_1", "appr_2", None]
    assert of("hold_1", tenant="other") is None


def test_save_writes_back_the_decision_and_keeps_the_rest(db: Db) -> None:
    _add(db, approval("appr_1", hold_id="hold_1", hold_expires_at=at(5)))
    decided = replace(
        approval("appr_1", hold_id="hold_1", hold_expires_at=at(5)),
        status=APPROVED, decided_by="ana", decided_at=at(3, us=1), note="fine", updated_at=at(3),
    )  # fmt: skip
    # Fields save does not write: changing them here changes nothing stored.
    ignored = replace(
        decided, summary="Other", evidence=[1], action=None, expires_at=at(1), key="k2",
        hold_id="hold_9", hold_expires_at=None, audit_seq=9, requested_by="x", workflow_id=None,
        created_at=at(-1),
    )  # fmt: skip

    def save(uow: UnitOfWork) -> Approval | None:
        uow.approvals.save(ignored)
        return uow.approvals.get("acme", "appr_1")

    assert db.commit(save) == decided
    assert _get(db, "appr_1") == decided


def test_saving_an_approval_never_added_or_of_another_tenant_stores_nothing(db: Db) -> None:
    _add(db, approval("appr_1"))
    denied = replace(approval("appr_1", tenant="other"), status=DENIED)

    def save(uow: UnitOfWork) -> None:
        uow.approvals.save(approval("appr_2"))
        uow.approvals.save(denied)

    db.commit(save)
    assert _get(db, "appr_2") is None
    assert _get(db, "appr_1") == approval("appr_1")


def _search(
    db: Db,
    tenant: str = "acme",
    *,
    statuses: set[ApprovalStatus] | None = None,
    after_id: str | None = None,
    limit: int = 10,
    now: datetime = NOW,
) -> list[str]:
    found = db.look(
        lambda uow: uow.approvals.search(
            tenant, statuses=statuses, after_id=after_id, limit=limit, now=now
        )
    )
    return [a.id for a in found]


def test_search_pages_through_a_tenants_approvals_by_id(db: Db) -> None:
    _add(db, *(approval(f"appr_{i}") for i in (4, 2, 5, 1, 3)), approval("appr_0", tenant="other"))
    assert _search(db) == ["appr_1", "appr_2", "appr_3", "appr_4", "appr_5"]
    assert _search(db, limit=2) == ["appr_1", "appr_2"]
    assert _search(db, limit=2, after_id="appr_2") == ["appr_3", "appr_4"]
    assert _search(db, after_id="appr_4") == ["appr_5"]
    assert _search(db, after_id="appr_5") == []
    assert _search(db, tenant="other") == ["appr_0"]
    assert _search(db, tenant="nobody") == []


def test_search_matches_statuses_as_readers_see_them(db: Db) -> None:
    # A pending approval past its expiry reads expired, swept or not; a decided
    # one keeps its decision whatever its expiry.
    _add(
        db,
        approval("appr_1", expires_at=at(5)),
        approval("appr_2", status=EXPIRED, expires_at=at(1)),
        approval("appr_3", status=APPROVED, expires_at=at(1)),
        approval("appr_4", status=DENIED, expires_at=at(1)),
        approval("appr_5", expires_at=at(60)),
    )
    just_before, then = at(5, us=-1), at(5)
    assert _search(db, statuses={PENDING}, now=just_before) == ["appr_1", "appr_5"]
    assert _search(db, statuses={EXPIRED}, now=just_before) == ["appr_2"]
    assert _search(db, statuses={PENDING}, now=then) == ["appr_5"]
    assert _search(db, statuses={EXPIRED}, now=then) == ["appr_1", "appr_2"]
    assert _search(db, statuses={APPROVED, DENIED}, now=at(600)) == ["appr_3", "appr_4"]
    assert _search(db, statuses={PENDING, EXPIRED}, now=then) == ["appr_1", "appr_2", "appr_5"]
    assert _search(db, statuses={EXPIRED}, now=then, after_id="appr_1") == ["appr_2"]
    assert _search(db, statuses={EXPIRED}, now=then, limit=1) == ["appr_1"]
    assert _search(db, statuses=set()) == []
    assert len(_search(db, statuses=None, now=at(600))) == 5


def test_due_for_expiry_lists_pending_ones_past_expiry_over_every_tenant(db: Db) -> None:
    # The sweeper takes the oldest overdue first, whoever's it is; ties by id.
    _add(
        db,
        approval("appr_1", expires_at=at(3)),
        approval("appr_2", tenant="other", expires_at=at(1)),
        approval("appr_3", expires_at=at(2)),
        approval("appr_4", tenant="zeta", expires_at=at(2)),
        approval("appr_5", expires_at=at(4)),
        approval("appr_6", status=APPROVED, expires_at=at(0)),
        approval("appr_7", status=EXPIRED, expires_at=at(0)),
        approval("appr_8", expires_at=at(4, us=1)),
    )

    def due(now: datetime, limit: int = 10) -> list[str]:
        return [a.id for a in db.look(lambda uow: uow.approvals.due_for_expiry(now, limit))]

    assert due(at(4)) == ["appr_2", "appr_3", "appr_4", "appr_1", "appr_5"]
    assert due(at(4), limit=2) == ["appr_2", "appr_3"]
    assert due(at(1)) == ["appr_2"]  # at its expiry exactly
    assert due(at(1, us=-1)) == []
    found = db.look(lambda uow: uow.approvals.due_for_expiry(at(1), 1))
    assert found == [approval("appr_2", tenant="other", expires_at=at(1))]


def test_settled_names_the_ids_no_longer_pending_at_that_instant(db: Db) -> None:
    _add(
        db,
        approval("appr_1", expires_at=at(5)),
        approval("appr_2", status=APPROVED),
        approval("appr_3", status=DENIED),
        approval("appr_4"),
        approval("appr_5", tenant="other"),
    )

    def settled(ids: list[str], now: datetime = NOW, tenant: str = "acme") -> list[str]:
        return db.look(lambda uow: uow.approvals.settled(tenant, ids, now))

    asked = ["appr_4", "appr_3", "appr_1", "appr_9", "appr_2", "appr_5"]
    # Unknown ids, and another tenant's, count as settled: nobody waits on them.
    assert settled(asked) == ["appr_3", "appr_9", "appr_2", "appr_5"]
    assert settled(asked, now=at(5)) == ["appr_3", "appr_1", "appr_9", "appr_2", "appr_5"]
    assert settled(["appr_1", "appr_4"]) == []
    assert settled(["appr_5"], tenant="other") == []
    assert settled([]) == []


def test_a_tenants_policy_is_read_back_and_replaced_whole(db: Db) -> None:
    assert db.look(lambda uow: uow.approvals.rules("acme")) is None
    first = ApprovalRules(attendees_more_than=5, outside_domains=("example.com", "a.example.org"))
    db.commit(lambda uow: uow.approvals.put_rules("acme", first, at(1, us=1), "admin-1"))
    assert db.look(lambda uow: uow.approvals.rules("acme")) == (first, at(1, us=1), "admin-1")
    assert db.look(lambda uow: uow.approvals.rules("other")) is None

    second = ApprovalRules(longer_than_minutes=120, priority_at_least=90)

    def replace_twice(uow: UnitOfWork) -> tuple[ApprovalRules, datetime, str] | None:
        uow.approvals.put_rules("acme", ApprovalRules(outside_domains=()), at(2), "admin-2")
        uow.approvals.put_rules("acme", second, at(3), "admin-3")
        return uow.approvals.rules("acme")

    assert db.commit(replace_twice) == (second, at(3), "admin-3")
    stored = db.look(lambda uow: uow.approvals.rules("acme"))
    assert stored == (second, at(3), "admin-3")
    assert stored is not None
    assert stored[0].outside_domains is None  # None, not an empty tuple
    empty = ApprovalRules(outside_domains=())
    db.commit(lambda uow: uow.approvals.put_rules("acme", empty, at(4), "admin-4"))
    assert db.look(lambda uow: uow.approvals.rules("acme")) == (empty, at(4), "admin-4")


def test_approvals_and_policies_not_committed_are_gone(db: Db) -> None:
    _add(db, approval("appr_1"))

    def change(uow: UnitOfWork) -> None:
        uow.approvals.add(approval("appr_2", hold_id="hold_1"))
        uow.approvals.save(replace(approval("appr_1"), status=DENIED, decided_by="ana"))
        uow.approvals.put_rules("acme", ApprovalRules(attendees_more_than=1), NOW, "admin")

    db.look(change)
    assert _get(db, "appr_2") is None
    assert db.look(lambda uow: uow.approvals.for_hold("acme", "hold_1")) is None
    assert _get(db, "appr_1") == approval("appr_1")
    assert db.look(lambda uow: uow.approvals.rules("acme")) is None
