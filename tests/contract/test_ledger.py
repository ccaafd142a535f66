"""Ledger: one record per key, the first answer by fingerprint, a workflow's executions, purges."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy.exc import IntegrityError

from slotward.engine.model import HoldStatus, LedgerRecord
from slotward.engine.ports import ReplayState, UnitOfWork
from tests.contract.calendar_values import binding
from tests.contract.conftest import Db
from tests.contract.values import NOW, at, hold, record


def _add(db: Db, *records: LedgerRecord) -> None:
    def add(uow: UnitOfWork) -> None:
        for r in records:
            uow.ledger.add(r)

    db.commit(add)


def _get(db: Db, key: str, tenant: str = "acme") -> LedgerRecord | None:
    return db.look(lambda uow: uow.ledger.get(tenant, key))


def _execution(key: str, **changes: Any) -> LedgerRecord:
    """A generic execution under way, its lease running."""
    fields: dict[str, Any] = {
        "kind": "execution", "state": "executing", "body": b"", "hold_id": None,
        "workflow_id": "wf", "tool": "send_email", "agent_id": "agent",
        "lease_token": "lease-1", "lease_expires_at": at(1, us=5),
    }  # fmt: skip
    return record(key, **{**fields, **changes})


def test_a_record_reads_back_as_added_in_its_unit_of_work_and_after(db: Db) -> None:
    for added in (record("k1", created_at=at(0, us=3)), _execution("k2", completed_at=at(2))):

        def add(uow: UnitOfWork, r: LedgerRecord = added) -> LedgerRecord | None:
            uow.ledger.add(r)
            return uow.ledger.get("acme", r.key)

        assert db.commit(add) == added
        assert _get(db, added.key) == added
        assert _get(db, added.key, tenant="other") is None


def test_a_record_not_committed_is_gone(db: Db) -> None:
    db.look(lambda uow: uow.ledger.add(record("k1")))
    assert _get(db, "k1") is None


def test_a_key_is_recorded_once_per_tenant(db: Db) -> None:
    _add(db, record("k1"))
    with pytest.raises((KeyError, IntegrityError)):
        db.commit(lambda uow: uow.ledger.add(record("k1", fingerprint="g" * 64)))
    assert _get(db, "k1") == record("k1")
    _add(db, record("k1", tenant="other"))
    assert _get(db, "k1", tenant="other") == record("k1", tenant="other")


def test_save_writes_back_the_mutable_fields_and_keeps_the_rest(db: Db) -> None:
    _add(db, _execution("k1"))
    done = _execution(
        "k1", state="succeeded", body=b'{"ok":true}', agent_id="other-agent",
        lease_token=None, lease_expires_at=None, expires_at=at(60 * 80), completed_at=at(3),
    )  # fmt: skip
    # Fields save does not write: changing them here changes nothing stored.
    ignored = replace(
        done, fingerprint="g" * 64, tool="other", workflow_id="other", created_at=at(9),
        hold_id="h", kind="hold",
    )  # fmt: skip

    def save(uow: UnitOfWork) -> LedgerRecord | None:
        uow.ledger.save(ignored)
        return uow.ledger.get("acme", "k1")

    assert db.commit(save) == done
    assert _get(db, "k1") == done


def test_saving_a_record_never_added_stores_nothing(db: Db) -> None:
    db.commit(lambda uow: uow.ledger.save(record("k1")))
    assert _get(db, "k1") is None


def test_a_removed_key_is_free_again(db: Db) -> None:
    _add(db, record("k1"), record("k1", tenant="other"))

    def remove(uow: UnitOfWork) -> None:
        uow.ledger.remove("acme", "k1")
        uow.ledger.remove("acme", "nope")  # no such key: nothing happens

    db.commit(remove)
    assert _get(db, "k1") is None
    assert _get(db, "k1", tenant="other") == record("k1", tenant="other")
    _add(db, record("k1", state="failed_terminal"))
    assert _get(db, "k1") == record("k1", state="failed_terminal")


def test_the_first_record_of_a_fingerprint_is_the_oldest_then_the_least_key(db: Db) -> None:
    fp = "g" * 64
    _add(
        db,
        record("k3", fingerprint=fp, created_at=at(1)),
        record("k2", fingerprint=fp, created_at=at(1)),
        record("k1", fingerprint=fp, created_at=at(2)),
        record("k0", fingerprint=fp, tenant="other", created_at=at(0)),
        record("k4", created_at=at(0)),
    )

    def first(tenant: str, fingerprint: str = fp) -> str | None:
        found = db.look(lambda uow: uow.ledger.find_by_fingerprint(tenant, fingerprint))
        return None if found is None else found.key

    assert first("acme") == "k2"
    assert first("other") == "k0"
    assert first("acme", "h" * 64) is None


def test_a_workflows_executions_oldest_first_without_hold_records(db: Db) -> None:
    _add(
        db,
        _execution("k3", created_at=at(1)),
        _execution("k2", created_at=at(1)),
        _execution("k1", created_at=at(2)),
        _execution("k4", created_at=at(0), workflow_id="other"),
        _execution("k5", created_at=at(0), tenant="other"),
        record("k6", created_at=at(0), workflow_id="wf"),  # a hold tool's record
    )

    def keys(limit: int, workflow: str = "wf", tenant: str = "acme") -> list[str]:
        return [
            r.key for r in db.look(lambda uow: uow.ledger.for_workflow(tenant, workflow, limit))
        ]

    assert keys(10) == ["k2", "k3", "k1"]
    assert keys(2) == ["k2", "k3"]
    assert keys(10, workflow="other") == ["k4"]
    assert keys(10, tenant="other") == ["k5"]
    assert keys(10, workflow="none") == []


def test_records_are_purgeable_from_their_expiry_unless_a_lease_runs(db: Db) -> None:
    _add(
        db,
        record("k1", expires_at=at(10)),
        _execution("k2", expires_at=at(5), lease_expires_at=at(20)),
        record("k3", tenant="other", expires_at=at(30)),
    )

    def purgeable(minutes: float) -> str | None:
        return db.look(lambda uow: uow.ledger.purgeable_tenant(at(minutes)))

    assert purgeable(0) is None
    assert db.look(lambda uow: uow.ledger.purgeable_tenant(at(10, us=-1))) is None
    assert purgeable(10) == "acme"  # exactly at its expiry
    assert purgeable(30) in {"acme", "other"}
    purged = db.commit(lambda uow: uow.ledger.purge("acme", at(19), 10))
    assert purged == 1  # k2's lease still runs
    assert [_get(db, k) is None for k in ("k1", "k2")] == [True, False]
    assert db.commit(lambda uow: uow.ledger.purge("acme", at(20), 10)) == 1  # lease over
    assert purgeable(29) is None
    assert _get(db, "k3", tenant="other") is not None


def test_a_purge_deletes_at_most_its_limit_of_one_tenants_records(db: Db) -> None:
    old = NOW - timedelta(hours=1)
    _add(db, *(record(f"k{i}", expires_at=old) for i in range(5)))
    _add(db, record("k0", tenant="other", expires_at=old), record("k9", expires_at=at(60)))
    counts = [db.commit(lambda uow: uow.ledger.purge("acme", NOW, 2)) for _ in range(4)]
    assert counts == [2, 2, 1, 0]
    assert [_get(db, f"k{i}") for i in range(5)] == [None] * 5
    assert _get(db, "k9") is not None
    assert _get(db, "k0", tenant="other") is not None
    assert db.look(lambda uow: uow.ledger.purgeable_tenant(NOW)) == "other"


def test_a_purge_not_committed_deletes_nothing(db: Db) -> None:
    _add(db, record("k1", expires_at=at(-1)))
    assert db.look(lambda uow: uow.ledger.purge("acme", NOW, 10)) == 1
    assert _get(db, "k1") == record("k1", expires_at=at(-1))


def test_a_claims_lookup_reads_its_record_its_intents_live_hold_and_calendars_together(
    db: Db,
) -> None:
    """Ledger.lookup_claim: what a create reads before deciding, in one read; the
    record and the calendars as Ledger.get and CalendarRepository.for_attendees
    would answer them alone (the live hold: test_hold_overlaps.py too)."""
    fp = "i" * 64
    db.commit(lambda uow: uow.holds.add(hold("hold_1", expires_at=at(5))))  # workflow "wf"
    db.commit(lambda uow: uow.holds.add(hold("hold_2", attendees=("b",), workflow_id="w2",
                                             status=HoldStatus.RELEASED)))  # fmt: skip
    db.commit(lambda uow: uow.calendars.put(binding("att_c")))
    _add(db, record("k1", hold_id="hold_1"), record("k2", hold_id="hold_2", workflow_id="w2"))

    def lookup(
        key: str, workflow: str, now: float = 0, tenant: str = "acme", who: tuple[str, ...] = ()
    ) -> tuple[str | None, str | None, bool]:
        def read(uow: UnitOfWork) -> tuple[str | None, str | None, bool]:
            found = uow.ledger.lookup_claim(tenant, key, workflow, fp, who, at(now))
            alone = uow.ledger.get(tenant, key), bool(uow.calendars.for_attendees(tenant, who))
            assert (found.record, found.calendars_bound) == alone
            record_key = None if found.record is None else found.record.key
            return (
                record_key,
                (None if found.live is None else found.live.id),
                found.calendars_bound,
            )

        return db.look(read)

    assert lookup("k1", "wf") == ("k1", "hold_1", False)
    assert lookup("k1", "wf", now=5) == ("k1", None, False)  # the hold expired exactly now
    assert lookup("k2", "w2") == ("k2", None, False)  # its hold released: not live
    assert lookup("k9", "wf") == (None, "hold_1", False)  # another key of the same intent
    assert lookup("k1", "nobody") == ("k1", None, False)
    assert lookup("k9", "nobody") == (None, None, False)
    assert lookup("k1", "wf", tenant="other") == (None, None, False)
    assert lookup("k9", "nobody", who=("att_a", "att_c")) == (None, None, True)
    assert lookup("k9", "nobody", who=("att_a", "att_b")) == (None, None, False)
    assert lookup("k9", "nobody", tenant="other", who=("att_c",)) == (None, None, False)


def test_a_claims_lookup_given_a_span_reads_the_attendees_active_holds_overlapping_it(
    db: Db,
) -> None:
    """The blockers' ids a create reads in its lookup: its attendees' held (expired
    or not, as :meth:`HoldRepository.blocking` then judges) and committed holds
    overlapping the span, of this tenant; none when not asked."""
    db.commit(lambda uow: uow.holds.add(hold("hold_1", expires_at=at(5))))  # att_a, 60-90
    db.commit(
        lambda uow: uow.holds.add(hold("hold_2", attendees=("b",), status=HoldStatus.COMMITTED))
    )
    db.commit(
        lambda uow: uow.holds.add(hold("hold_3", attendees=("c",), status=HoldStatus.RELEASED))
    )

    def overlapping(who: tuple[str, ...], span: tuple[int, int] | None,
                    tenant: str = "acme") -> set[str] | None:  # fmt: skip
        between = None if span is None else (at(span[0]), at(span[1]))

        def read(uow: UnitOfWork) -> set[str] | None:
            found = uow.ledger.lookup_claim(tenant, "k", "wf", "f" * 64, who, at(10), between)
            return None if found.overlapping is None else set(found.overlapping)

        return db.look(read)

    assert overlapping(("att_a", "b", "c"), (60, 90)) == {"hold_1", "hold_2"}
    assert overlapping(("att_a", "b", "c"), (90, 120)) == set()  # ends as the span starts
    assert overlapping(("att_a",), (89, 200)) == {"hold_1"}
    assert overlapping(("b",), (0, 61)) == {"hold_2"}
    assert overlapping(("nobody",), (60, 90)) == set()
    assert overlapping((), (60, 90)) == set()  # no attendee: nothing to overlap
    assert overlapping(("att_a", "b"), (60, 90), tenant="other") == set()
    assert overlapping(("att_a", "b"), None) is None


def test_a_replay_state_reads_the_record_its_hold_and_the_emails_directory(db: Db) -> None:
    """Ledger.replay_state: the three reads of a known create's replay, together."""
    pairs = [("att_a", "a@example.com"), ("att_b", "b@example.com")]
    db.commit(lambda uow: uow.directory.register("acme", pairs, NOW))
    placed = hold("hold_1", expires_at=at(5))
    db.commit(lambda uow: uow.holds.add(placed))
    gone = record("k2", hold_id="hold_gone", created=False, body=b'{"other":true}')
    _add(db, record("k1", hold_id="hold_1"), gone)

    def state(key: str, emails: list[str], tenant: str = "acme") -> ReplayState | None:
        return db.look(lambda uow: uow.ledger.replay_state(tenant, key, emails))

    found = state("k1", ["a@example.com", "b@example.com", "nobody@example.com"])
    stored = _get(db, "k1")
    assert stored is not None
    assert found == ReplayState(
        key=stored.key,
        fingerprint=stored.fingerprint,
        created=stored.created,
        body=stored.body,
        hold_id="hold_1",
        hold_status=HoldStatus.HELD,
        hold_expires_at=at(5),
        directory={"a@example.com": "att_a", "b@example.com": "att_b"},
    )
    no_emails = state("k1", [])
    assert no_emails is not None
    assert no_emails.directory == {}
    without_hold = state("k2", ["a@example.com"])
    assert without_hold is not None
    assert (without_hold.hold_status, without_hold.hold_expires_at) == (None, None)
    assert (without_hold.created, without_hold.body) == (False, b'{"other":true}')
    assert state("k3", ["a@example.com"]) is None
    assert state("k1", ["a@example.com"], tenant="other") is None
