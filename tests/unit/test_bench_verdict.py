"""The race benchmark's verdict: a correct race passes, a broken one is named.

The histories are built by hand from engine values (the checker's own rules are
tested in test_history.py): one create per hold, its ledger record and its
audit entry, as the engine writes them.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from slotward.benchmarks.race import verdict, winners
from slotward.benchmarks.race_plan import TENANT, slot_email
from slotward.engine.model import AuditEntry, Hold, HoldStatus, LedgerRecord
from slotward.engine.rules.attendees import attendee_id_for_email
from slotward.engine.rules.audit import next_entry
from slotward.engine.rules.documents import encode, hold_document
from slotward.testing.history import Call, Snapshot

NOW = datetime(2030, 10, 1, 9, 0, tzinfo=UTC)
SLOT = datetime(2030, 10, 2, 10, 0, tzinfo=UTC)


@dataclass
class Race:
    calls: list[Call] = field(default_factory=list)
    holds: list[Hold] = field(default_factory=list)
    ledger: list[LedgerRecord] = field(default_factory=list)
    audit: list[AuditEntry] = field(default_factory=list)

    def claim(self, slot: int, n: int, priority: int = 50, **changes: Any) -> Hold:
        """A hold on ``slot`` created by agent ``n``: answered fresh, recorded, audited."""
        hold_id = f"hold_{slot}_{n}"
        hold = Hold(
            id=hold_id, key=f"client:k-{hold_id}", tenant=TENANT, workflow_id=f"wf-{n}",
            agent_id=f"agent-{n}", attendees=(attendee_id_for_email(TENANT, slot_email(slot)),),
            start=SLOT + timedelta(minutes=15 * (n % 2)), end=SLOT + timedelta(minutes=45),
            title="race", description=None, priority=priority, status=HoldStatus.HELD,
            expires_at=NOW + timedelta(minutes=5), token=1, intent_fp=f"fp-{hold_id}",
            created_at=NOW - timedelta(minutes=1), updated_at=NOW - timedelta(minutes=1),
            audit_seq=len(self.audit) + 1,
        )  # fmt: skip
        body = encode(hold_document(hold, NOW))
        at = NOW.timestamp() - 60 + len(self.calls)
        request = {"workflow_id": hold.workflow_id, "attendees": [slot_email(slot)],
                   "start": hold.start.isoformat(), "end": hold.end.isoformat()}  # fmt: skip
        headers = {"Idempotency-Key": f"k-{hold_id}", "Idempotent-Replayed": "false"}
        self.calls.append(Call("create", TENANT, hold.agent_id, request, 201, body, headers,
                               idempotency_key_sent=f"k-{hold_id}", invoked_at=at,
                               completed_at=at + 0.5, intent=f"agent-{n}"))  # fmt: skip
        self.ledger.append(LedgerRecord(tenant=TENANT, key=hold.key, fingerprint=hold.key,
                                        state="succeeded", created=True, body=body,
                                        created_at=NOW, expires_at=NOW + timedelta(hours=72),
                                        hold_id=hold_id))  # fmt: skip
        head = (self.audit[-1].seq, self.audit[-1].hash) if self.audit else (0, "0" * 64)
        self.audit.append(next_entry(head, tenant=TENANT, at=NOW - timedelta(minutes=1),
                                     actor=hold.agent_id, action="hold.create", key=hold.key,
                                     hold_id=hold_id, outcome="fresh"))  # fmt: skip
        stored = replace(hold, **changes)
        self.holds.append(stored)
        return stored

    def snapshot(self) -> Snapshot:
        return Snapshot(tuple(self.holds), tuple(self.ledger), tuple(self.audit))


def test_a_race_with_one_winner_per_slot_passes() -> None:
    race = Race()
    for slot in range(3):
        race.claim(slot, slot)
    assert verdict(race.calls, race.snapshot(), NOW, 3) == []
    assert {s: len(ids) for s, ids in winners(race.snapshot(), NOW, 3).items()} == {
        0: 1,
        1: 1,
        2: 1,
    }


def test_two_winners_of_one_slot_and_none_of_another_are_named() -> None:
    race = Race()
    race.claim(0, 0)
    race.claim(0, 1)  # overlaps agent 0's hold: a double booking
    race.claim(2, 2)
    found = verdict(race.calls, race.snapshot(), NOW, 3)
    assert any(line.startswith("no_overlap:") for line in found), found
    assert any(line.startswith("slot 0 ") and "2 winners" in line for line in found), found
    assert any(line.startswith("slot 1 ") and "0 winners: none" in line for line in found), found
    assert "3 winners for 3 slots" not in found  # the total alone would pass: 2 + 0 + 1


def test_an_expired_or_released_hold_is_no_winner() -> None:
    race = Race()
    race.claim(0, 0, expires_at=NOW - timedelta(seconds=1))  # past its expiry, unswept
    found = verdict(race.calls, race.snapshot(), NOW, 1)
    assert "0 winners for 1 slots" in found
    assert winners(race.snapshot(), NOW, 1) == {0: []}


def test_a_preemption_by_a_lower_priority_is_named() -> None:
    race = Race()
    winner = race.claim(0, 0, priority=30)
    race.claim(0, 1, priority=70, status=HoldStatus.PREEMPTED, preempted_by=winner.id)
    found = verdict(race.calls, race.snapshot(), NOW, 1)
    assert any(line.startswith("preemption_by_higher_priority:") for line in found), found
