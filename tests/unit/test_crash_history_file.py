"""The crash test's evidence file: a history saved and loaded gets the same verdict.

A small history is built by hand: a hold created (and the create replayed),
then committed, each change with its ledger record, audit entry and outbox
event; an execution acquired and completed; a call whose answer was lost. It
is consistent; dropping one stored row makes it inconsistent. Either way the
file reads back equal, and ``tests.e2e.recheck`` gives the same verdict from it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from slotward.engine.model import AuditEntry, Hold, HoldStatus, LedgerRecord
from slotward.engine.rules.audit import GENESIS, next_entry
from slotward.engine.rules.documents import encode, hold_document
from slotward.testing.history import check
from slotward.testing.recorded import Call, Op, Snapshot
from tests.e2e.history_file import OutboxRow, Recording, load, save
from tests.e2e.recheck import main, problems

NOW = datetime(2031, 5, 6, 8, 0, tzinfo=UTC)
SLOT = datetime(2031, 5, 6, 9, 0, tzinfo=UTC)


@dataclass
class _History:
    calls: list[Call] = field(default_factory=list)
    holds: list[Hold] = field(default_factory=list)
    ledger: list[LedgerRecord] = field(default_factory=list)
    audit: list[AuditEntry] = field(default_factory=list)
    outbox: list[OutboxRow] = field(default_factory=list)
    unlogged: str | None = None  # an execution audit action the server "forgot"

    def call(
        self, op: Op, status: int | None, body: bytes, key: str, *, replayed: bool = False,
        target: str | None = None, intent: str = "", request: dict[str, Any] | None = None,
    ) -> None:  # fmt: skip
        at = NOW.timestamp() - 60 + len(self.calls)
        headers = {"Idempotency-Key": key, "Idempotent-Replayed": str(replayed).lower()}
        self.calls.append(Call(op, "acme", "agent-0", request or {}, status, body,
                               headers if status else {}, target, None, at, at + 0.25,
                               intent or None))  # fmt: skip

    def change(self, action: str, event: str, hold: Hold, key: str, status: int) -> bytes:
        """A fresh change of ``hold``: its stored answer, audit entry and outbox event."""
        body = encode(hold_document(hold, NOW))
        kept = NOW + timedelta(hours=72)
        self.ledger.append(LedgerRecord(tenant="acme", key=f"client:{key}", fingerprint=key,
                                        state="succeeded", created=status == 201, body=body,
                                        created_at=NOW, expires_at=kept,
                                        hold_id=hold.id))  # fmt: skip
        self._audit(action, key, hold.id, "fresh")
        self.outbox.append(OutboxRow("acme", event, hold.id))
        return body

    def log(self, action: str, key: str, outcome: str) -> None:
        """An audit entry that names no hold (an execution's)."""
        if action != self.unlogged:
            self._audit(action, key, None, outcome)

    def _audit(self, action: str, key: str, hold_id: str | None, outcome: str) -> None:
        head = (self.audit[-1].seq, self.audit[-1].hash) if self.audit else (0, GENESIS)
        self.audit.append(next_entry(head, tenant="acme", at=NOW, actor="agent-0", action=action,
                                     key=key, hold_id=hold_id, outcome=outcome))  # fmt: skip

    def recording(self) -> Recording:
        snapshot = Snapshot(tuple(self.holds), tuple(self.ledger), tuple(self.audit))
        return Recording(tuple(self.calls), snapshot, NOW, tuple(self.outbox), {"seed": 7})


def _consistent(unlogged: str | None = None) -> _History:
    h = _History(unlogged=unlogged)
    held = Hold("h1", "client:idem_h1", "acme", "wf-1", "agent-0", ("room-0@example.com",), SLOT,
                SLOT + timedelta(minutes=30), "sync", None, 50, HoldStatus.HELD,
                NOW + timedelta(minutes=5), 1, "fp-h1", NOW, NOW, 1)  # fmt: skip
    created = h.change("hold.create", "hold.created", held, "idem_h1", 201)
    label = "acme create wf-1 step 1: room-0@example.com 2031-05-06T09:00:00Z 30m"
    h.call("create", None, b"", "", intent=label)  # the answer lost; the retry replays
    h.call("create", 201, created, "idem_h1", replayed=True, intent=label)
    h.call("create", 201, created, "idem_h1", replayed=True, intent=label)
    committed = replace(held, status=HoldStatus.COMMITTED, token=2, committed_at=NOW, audit_seq=2)
    body = h.change("hold.commit", "hold.committed", committed, "idem_c1", 200)
    h.call(
        "commit", 200, body, "idem_c1", target="h1", intent="acme commit h1", request={"token": 1}
    )
    h.holds.append(committed)
    lease = encode({"key": "idem_job", "state": "acquired", "lease_token": "lease_1",
                    "lease_expires_at": "2031-05-06T08:00:30Z"})  # fmt: skip
    h.call("acquire", 201, lease, "idem_job", intent="acme acquire wf-exec-1 send_email")
    h.log("execution.acquire", "client:idem_job", "fresh")
    done = encode({"key": "idem_job", "state": "succeeded", "result": {"n": 1}})
    finish = {"lease_token": "lease_1", "outcome": "succeeded", "result": {"n": 1}}
    h.call("complete", 200, done, "idem_job", target="idem_job", intent="acme complete",
           request=finish)  # fmt: skip
    h.log("execution.complete", "client:idem_job", "succeeded")
    h.ledger.append(LedgerRecord(tenant="acme", key="client:idem_job", fingerprint="fp",
                                 state="succeeded", created=False, body=done, created_at=NOW,
                                 expires_at=NOW + timedelta(hours=72),
                                 kind="execution"))  # fmt: skip
    return h


def _roundtrip(recording: Recording, tmp_path: Path) -> Recording:
    loaded = load(save(tmp_path / "history.json", recording))
    assert loaded == recording
    assert loaded.calls[-1].intent == recording.calls[-1].intent
    return loaded


def test_a_consistent_history_reads_back_equal_and_consistent(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recording = _consistent().recording()
    assert check(recording.calls, recording.snapshot, recording.now) == []
    assert problems(recording) == []
    assert problems(_roundtrip(recording, tmp_path)) == []
    assert main([str(tmp_path / "history.json")]) == 0
    assert capsys.readouterr().out.startswith("consistent\n")


def test_a_lost_hold_is_found_again_in_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    h = _consistent()
    h.holds.clear()  # acknowledged, committed, and gone
    recording = h.recording()
    violations = check(recording.calls, recording.snapshot, recording.now)
    assert "acknowledged_writes_present" in {v.rule for v in violations}
    loaded = _roundtrip(recording, tmp_path)
    assert check(loaded.calls, loaded.snapshot, loaded.now) == violations
    assert problems(loaded) == problems(recording) != []
    assert main([str(tmp_path / "history.json")]) == 1
    assert "acknowledged_writes_present" in capsys.readouterr().out


def test_a_missing_outbox_event_is_found_again_in_the_file(tmp_path: Path) -> None:
    h = _consistent()
    del h.outbox[0]  # the hold.created event
    recording = h.recording()
    found = problems(recording)
    assert len(found) == 2  # one per acknowledgement: both replays of the create
    assert all(line.startswith("no hold.created event") for line in found)
    assert problems(_roundtrip(recording, tmp_path)) == found


def test_bodies_that_are_not_utf8_and_odd_instants_read_back_exactly(tmp_path: Path) -> None:
    h = _consistent()
    h.call("create", 502, b"\xff\xfe not json", "")
    h.holds[0] = replace(h.holds[0], created_at=NOW + timedelta(microseconds=7))
    _roundtrip(h.recording(), tmp_path)


def test_a_file_of_another_format_or_with_unknown_fields_is_refused(tmp_path: Path) -> None:
    path = save(tmp_path / "history.json", _consistent().recording())
    text = path.read_text()
    path.write_text(text.replace('"slotward-crash-history/1"', '"something-else/1"'))
    with pytest.raises(ValueError, match="not a"):
        load(path)
    path.write_text(text.replace('"intent":', '"intent_v2":', 1))
    with pytest.raises(ValueError, match="intent_v2"):
        load(path)


@pytest.mark.parametrize("action", ["execution.acquire", "execution.complete"])
def test_a_missing_execution_audit_entry_is_found(action: str) -> None:
    h = _consistent(unlogged=action)
    found = problems(h.recording())
    assert len(found) == 1, found
    assert action in found[0]
