"""The history checker: a consistent history passes, and each broken promise is named.

``World`` is a small correct history built by hand: a hold created (and
replayed) then committed, a hold preempted by a higher priority, a released
hold, and an execution acquired, completed and replayed. Each test mutates it
in one way and asserts that exactly the rule it breaks reports it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from slotward.engine.model import AuditEntry, Hold, HoldStatus, LedgerRecord
from slotward.engine.rules.audit import next_entry
from slotward.engine.rules.documents import encode, hold_document
from slotward.engine.rules.fingerprint import derive_key, hold_intent
from slotward.engine.rules.timenorm import Interval, format_instant
from slotward.testing.history import (
    Call,
    Snapshot,
    Violation,
    acknowledged_writes_present,
    check,
    commits_with_current_token,
    no_overlap,
    one_effect_per_key,
    one_key_per_intent,
    preemption_by_higher_priority,
    replays_identical,
)

NOW = datetime(2030, 10, 1, 9, 0, tzinfo=UTC)
T0 = NOW.timestamp() - 60
SLOT = datetime(2030, 10, 2, 10, 0, tzinfo=UTC)


def _hold(hold_id: str, room: str, priority: int = 50, **changes: Any) -> Hold:
    base = Hold(
        id=hold_id, key=f"client:k-{hold_id}", tenant="acme", workflow_id=f"wf-{hold_id}",
        agent_id="agent-a", attendees=(room,), start=SLOT, end=SLOT + timedelta(minutes=30),
        title="t", description=None, priority=priority, status=HoldStatus.HELD,
        expires_at=NOW + timedelta(minutes=5), token=1, intent_fp=f"fp-{hold_id}",
        created_at=NOW - timedelta(minutes=1), updated_at=NOW - timedelta(minutes=1),
        audit_seq=1,
    )  # fmt: skip
    return replace(base, **changes)


def _request(hold: Hold, **changes: Any) -> dict[str, Any]:
    """The create body that asks for ``hold`` (its key is sent as a client key)."""
    asked = {"workflow_id": hold.workflow_id, "attendees": list(hold.attendees),
             "start": format_instant(hold.start), "end": format_instant(hold.end)}  # fmt: skip
    return asked | changes


def _answer(status: int | None, body: bytes, key: str, *, replayed: bool = False) -> dict[str, Any]:
    headers = {"Idempotency-Key": key, "Idempotent-Replayed": "true" if replayed else "false"}
    return {"status": status, "body": body, "headers": headers if status else {}}


@dataclass
class World:
    calls: list[Call] = field(default_factory=list)
    holds: dict[str, Hold] = field(default_factory=dict)
    ledger: list[LedgerRecord] = field(default_factory=list)
    audit: list[AuditEntry] = field(default_factory=list)
    clock: float = T0

    def call(self, op: Any, request: dict[str, Any], answer: dict[str, Any], **kw: Any) -> Call:
        self.clock += 1
        made = Call(op, "acme", "agent-a", request, invoked_at=self.clock,
                    completed_at=self.clock + 0.5, **answer, **kw)  # fmt: skip
        self.calls.append(made)
        return made

    def record(self, key: str, status: int, body: bytes, **kw: Any) -> None:
        self.ledger.append(LedgerRecord(tenant="acme", key=key, fingerprint=key,
                                        state="succeeded", created=status == 201, body=body,
                                        created_at=NOW, expires_at=NOW + timedelta(hours=72),
                                        **kw))  # fmt: skip

    def create(self, hold: Hold, *, replays: int = 0, intent: str | None = None,
               step: int | None = None, preempts: tuple[Hold, ...] = (),
               at: datetime = NOW) -> bytes:  # fmt: skip
        """Created fresh, and replayed; a client key is sent, a derived one is not.

        The holds it ``preempts`` are logged preempted just before it, as the
        engine does (in one transaction); their stored state is the caller's.
        """
        for loser in preempts:
            self.log("hold.preempt", loser.id, loser.key, at=at)
        body = encode(hold_document(replace(hold, status=HoldStatus.HELD, token=1), NOW))
        public = hold.key.removeprefix("client:")
        sent = None if hold.key.startswith("idem_") else public
        request = _request(hold) | ({} if step is None else {"step": step})
        for n in range(replays + 1):
            self.call("create", request, _answer(201, body, public, replayed=n > 0),
                      idempotency_key_sent=sent, intent=intent)  # fmt: skip
        self.record(hold.key, 201, body, hold_id=hold.id)
        self.log("hold.create", hold.id, hold.key, at=at)
        self.holds[hold.id] = hold
        return body

    def log(self, action: str, hold_id: str, key: str | None = None, at: datetime = NOW) -> None:
        """Append to the audit chain, as the engine does beside each change."""
        head = (self.audit[-1].seq, self.audit[-1].hash) if self.audit else (0, "0" * 64)
        self.audit.append(next_entry(head, tenant="acme", at=at, actor="agent-a",
                                     action=action, key=key, hold_id=hold_id,
                                     outcome="fresh"))  # fmt: skip

    def act(self, op: Any, hold: Hold, token: int | None = None, at: datetime = NOW) -> None:
        """A fresh commit or release of ``hold`` (as it is afterwards), answered and logged."""
        body = encode(hold_document(hold, NOW))
        key = f"idem_{op}_{hold.id}"
        self.call(op, {} if token is None else {"token": token}, _answer(200, body, key),
                  target=hold.id)  # fmt: skip
        self.record(key, 200, body, hold_id=hold.id)
        self.log(f"hold.{op}", hold.id, key, at=at)

    def snapshot(self) -> Snapshot:
        return Snapshot(tuple(self.holds.values()), tuple(self.ledger), tuple(self.audit))


def _world() -> World:
    w = World()
    a = _hold("a", "room-1")
    w.create(a, replays=2)
    w.act("commit", replace(a, status=HoldStatus.COMMITTED, token=2, committed_at=NOW), token=1)
    w.holds["a"] = replace(a, status=HoldStatus.COMMITTED, token=2, committed_at=NOW)
    w.create(_hold("b", "room-2", priority=10))
    w.create(_hold("c", "room-2", priority=90), preempts=(w.holds["b"],))
    w.holds["b"] = replace(w.holds["b"], status=HoldStatus.PREEMPTED, token=2, preempted_by="c")
    d = _hold("d", "room-3")
    w.create(d)
    w.holds["d"] = replace(d, status=HoldStatus.RELEASED, token=2)
    w.act("release", w.holds["d"])
    lease = encode({"key": "job", "state": "acquired", "lease_token": "lease_1",
                    "lease_expires_at": "2030-10-01T09:00:30Z"})  # fmt: skip
    w.call("acquire", {"tool": "send"}, _answer(201, lease, "job"))
    done = encode({"key": "job", "state": "succeeded", "result": {"id": 1}})
    outcome = {"lease_token": "lease_1", "outcome": "succeeded", "result": {"id": 1}}
    w.call("complete", outcome, _answer(200, done, "job"), target="job")
    w.call("acquire", {"tool": "send"}, _answer(200, done, "job", replayed=True))
    w.record("client:job", 200, done, kind="execution")
    return w


RULES = [
    one_effect_per_key,
    one_key_per_intent,
    no_overlap,
    preemption_by_higher_priority,
    commits_with_current_token,
    acknowledged_writes_present,
    replays_identical,
]


def _only(rule: str, violations: list[Violation]) -> Violation:
    assert [v.rule for v in violations] == [rule], violations
    return violations[0]


@pytest.mark.parametrize("rule", RULES, ids=lambda r: r.__name__)
def test_a_consistent_history_breaks_no_rule(rule: Any) -> None:
    w = _world()
    assert rule(w.calls, w.snapshot(), NOW) == []


def test_check_runs_every_rule() -> None:
    w = _world()
    assert check(w.calls, w.snapshot(), NOW) == []
    del w.holds["d"]
    assert {v.rule for v in check(w.calls, w.snapshot(), NOW)} >= {"acknowledged_writes_present"}


def test_a_key_naming_two_holds_is_a_duplicate_effect() -> None:
    w = _world()
    other = replace(w.holds["a"], id="a2", status=HoldStatus.RELEASED)
    w.holds["a2"] = other
    found = _only("one_effect_per_key", one_effect_per_key(w.calls, w.snapshot(), NOW))
    assert set(found.ids) == {"client:k-a", "a", "a2"}


def test_two_fresh_answers_for_one_key_are_a_duplicate_effect() -> None:
    w = _world()
    first = w.calls[0]
    w.calls.append(replace(first, body=first.body.replace(b'"a"', b'"a9"')))
    violations = one_effect_per_key(w.calls, w.snapshot(), NOW)
    assert {v.rule for v in violations} == {"one_effect_per_key"}
    assert any("a9" in v.ids for v in violations)
    assert any("twice" in v.detail for v in violations)


def test_one_live_hold_per_intent() -> None:
    w = _world()
    w.holds["c2"] = replace(w.holds["c"], id="c2", key="client:k-c2", attendees=("room-9",))
    found = _only("one_effect_per_key", one_effect_per_key(w.calls, w.snapshot(), NOW))
    assert set(found.ids) == {"c", "c2"}
    # once the second one has expired (as readers see it) it no longer counts
    w.holds["c2"] = replace(w.holds["c2"], expires_at=NOW)
    assert one_effect_per_key(w.calls, w.snapshot(), NOW) == []


def _lease_call(token: str, expires: str, status: int = 201) -> Call:
    body = encode({"key": "job2", "state": "acquired", "lease_token": token,
                   "lease_expires_at": expires})  # fmt: skip
    return Call("acquire", "acme", "agent-a", {"lease_seconds": 30}, status, body,
                {"Idempotency-Key": "job2", "Idempotent-Replayed": "false"},
                invoked_at=T0, completed_at=T0 + 1)  # fmt: skip


def test_two_leases_at_once_are_a_duplicate_effect_but_a_takeover_is_not() -> None:
    first = _lease_call("lease_1", "2030-10-01T09:00:30Z")
    takeover = _lease_call("lease_2", "2030-10-01T09:01:00Z")  # granted at 09:00:30
    early = _lease_call("lease_3", "2030-10-01T09:00:50Z")  # granted at 09:00:20
    snap = Snapshot(ledger=(LedgerRecord(tenant="acme", key="client:job2", fingerprint="f",
                                         state="executing", created=False, body=b"",
                                         created_at=NOW, expires_at=NOW,
                                         kind="execution"),))  # fmt: skip
    assert one_effect_per_key([first, takeover], snap, NOW) == []
    found = _only("one_effect_per_key", one_effect_per_key([takeover, early], snap, NOW))
    assert found.ids == ("job2", "lease_3", "lease_2")
    freed = Call("complete", "acme", "agent-a",
                 {"lease_token": "lease_1", "outcome": "failed_retryable"}, None,
                 target="job2", invoked_at=T0)  # fmt: skip
    assert one_effect_per_key([first, early, freed], snap, NOW) == []


def test_overlapping_committed_holds_are_reported() -> None:
    w = _world()
    late = SLOT + timedelta(minutes=15)
    w.holds["e"] = _hold("e", "room-1", status=HoldStatus.COMMITTED, start=late,
                         end=late + timedelta(hours=1))  # fmt: skip
    found = _only("no_overlap", no_overlap(w.calls, w.snapshot(), NOW))
    assert found.ids == ("room-1", "a", "e")
    w.holds["e"] = replace(w.holds["e"], start=SLOT + timedelta(minutes=30))  # touching is fine
    assert no_overlap(w.calls, w.snapshot(), NOW) == []


def test_an_expired_hold_does_not_overlap() -> None:
    w = _world()
    w.holds["e"] = _hold("e", "room-1", expires_at=NOW)  # held in storage, expired to readers
    assert no_overlap(w.calls, w.snapshot(), NOW) == []
    assert no_overlap(w.calls, w.snapshot(), NOW - timedelta(seconds=1)) != []


# Overlaps over time: two holds of room-5 on one slot, created (and ended) at
# given seconds before NOW, so that the stored state alone shows nothing.


def _booked(w: World, hold_id: str, at: int, ttl: int = 300, **changes: Any) -> Hold:
    """Hold ``hold_id`` on room-5's slot, created ``at`` seconds before NOW for ``ttl`` s."""
    created = NOW - timedelta(seconds=at)
    hold = _hold(hold_id, "room-5", expires_at=created + timedelta(seconds=ttl), **changes)
    w.create(hold, at=created)
    return hold


def _released(w: World, hold: Hold, at: int) -> None:
    w.holds[hold.id] = replace(hold, status=HoldStatus.RELEASED, token=2)
    w.act("release", w.holds[hold.id], at=NOW - timedelta(seconds=at))


def test_an_overlap_that_ended_before_the_snapshot_is_reported() -> None:
    w = _world()
    _booked(w, "e", 60)
    f = _booked(w, "f", 30, start=SLOT + timedelta(minutes=15), end=SLOT + timedelta(minutes=45))
    _released(w, f, 10)
    found = _only("no_overlap", check(w.calls, w.snapshot(), NOW))
    assert found.ids == ("room-5", "e", "f")
    assert found.detail == (
        "room-5: e [2030-10-02T10:00:00Z, 2030-10-02T10:30:00Z) and "
        "f [2030-10-02T10:15:00Z, 2030-10-02T10:45:00Z) overlap, both blocking at "
        f"2030-10-01T08:59:30Z (audit seq {w.audit[-2].seq}: hold.create of f)"
    )


def test_holds_one_after_the_other_do_not_overlap() -> None:
    w = _world()
    e = _booked(w, "e", 90)
    _released(w, e, 60)
    _booked(w, "f", 60, ttl=30)  # created at the instant e was released, expires at NOW-30s
    _booked(w, "g", 30)  # created at the instant f expired
    w.holds["f"] = replace(w.holds["f"], status=HoldStatus.EXPIRED)
    w.log("hold.expire", "f", at=NOW - timedelta(seconds=30))  # swept after g's create
    assert check(w.calls, w.snapshot(), NOW) == []


def test_a_hold_released_after_another_was_created_overlaps_even_at_one_instant() -> None:
    w = _world()
    e = _booked(w, "e", 90)
    _booked(w, "f", 60)
    _released(w, e, 60)  # the same instant, but logged after f's creation
    assert _only("no_overlap", check(w.calls, w.snapshot(), NOW)).ids == ("room-5", "e", "f")


@pytest.mark.parametrize("winner_first", [False, True])
def test_a_preemption_is_no_overlap_unless_the_winner_is_logged_first(winner_first: bool) -> None:
    w = _world()
    loser = _booked(w, "e", 60, priority=10)
    winner, at = _hold("f", "room-5", priority=90), NOW - timedelta(seconds=30)
    w.create(winner, preempts=() if winner_first else (loser,), at=at)
    if winner_first:  # one instant, but the loser still blocked when the winner was placed
        w.log("hold.preempt", "e", loser.key, at=at)
    w.holds["e"] = replace(loser, status=HoldStatus.PREEMPTED, token=2, preempted_by="f")
    found = check(w.calls, w.snapshot(), NOW)
    assert [v.ids for v in found] == ([("room-5", "e", "f")] if winner_first else [])


@pytest.mark.parametrize("between", ["nothing", "released", "live"])
@pytest.mark.parametrize("swept", [False, True])
def test_a_late_commit_overlaps_only_a_hold_that_still_blocks(between: str, swept: bool) -> None:
    """e expires at NOW-60s; f is placed on its slot at NOW-50s; e is committed at NOW-10s,
    when f is released already, or not yet (it is released at NOW-5s)."""
    w = _world()
    e = _booked(w, "e", 120, ttl=60)
    if swept:
        w.holds["e"] = replace(e, status=HoldStatus.EXPIRED)
        w.log("hold.expire", "e", at=NOW - timedelta(seconds=60))
    f = _booked(w, "f", 50) if between != "nothing" else None
    if f is not None and between == "released":
        _released(w, f, 20)
    committed = replace(e, status=HoldStatus.COMMITTED, token=2, committed_at=NOW)
    w.act("commit", committed, token=1, at=NOW - timedelta(seconds=10))
    w.holds["e"] = committed
    if f is not None and between == "live":
        _released(w, f, 5)
    found = check(w.calls, w.snapshot(), NOW)
    if between != "live":
        assert found == []
        return
    assert _only("no_overlap", found).ids == ("room-5", "f", "e")
    assert found[0].detail.endswith(
        f"both blocking at 2030-10-01T08:59:50Z (audit seq {w.audit[-2].seq}: hold.commit of e)"
    )


def test_preemption_by_a_lower_or_equal_priority_is_reported() -> None:
    w = _world()
    w.holds["c"] = replace(w.holds["c"], priority=10)
    found = _only("preemption_by_higher_priority",
                  preemption_by_higher_priority(w.calls, w.snapshot(), NOW))  # fmt: skip
    assert found.ids == ("b", "c")
    w.holds["b"] = replace(w.holds["b"], preempted_by="nobody")
    assert len(preemption_by_higher_priority(w.calls, w.snapshot(), NOW)) == 1


def test_a_commit_that_skips_a_token_is_reported() -> None:
    w = _world()
    commit = next(c for c in w.calls if c.op == "commit")
    w.calls[w.calls.index(commit)] = replace(commit, request={"token": 0})
    found = commits_with_current_token(w.calls, w.snapshot(), NOW)
    assert {v.ids for v in found} == {("a",)}
    # not moved on by one, older than the create's token, and not the audit log's token
    assert len(found) == 3
    assert [v for v in check(w.calls, w.snapshot(), NOW) if v.rule != found[0].rule] == []


def test_a_commit_after_a_release_was_answered_is_reported() -> None:
    w = _world()
    g = _hold("g", "room-6")
    w.create(g)
    released = replace(g, status=HoldStatus.RELEASED, token=2)
    w.act("release", released)
    committed = replace(g, status=HoldStatus.COMMITTED, token=2, committed_at=NOW)
    w.act("commit", committed, token=1)  # a buggy server accepted the old token
    w.holds["g"] = committed
    found = [v for v in check(w.calls, w.snapshot(), NOW) if "after an answer" in v.detail]
    assert [v.ids for v in found] == [("g",)]


def test_a_committed_hold_without_its_commit_is_reported_unless_the_commit_went_unanswered() -> (
    None
):
    w = _world()
    w.holds["e"] = _hold("e", "room-5", status=HoldStatus.COMMITTED, token=2, committed_at=NOW)
    w.log("hold.create", "e", "client:k-e")
    w.log("hold.commit", "e", "idem_commit_e")
    found = _only(
        "commits_with_current_token", commits_with_current_token(w.calls, w.snapshot(), NOW)
    )
    assert found.ids == ("e",)
    w.call("commit", {"token": 1}, {"status": None}, target="e")
    assert check(w.calls, w.snapshot(), NOW) == []


def test_a_committed_hold_whose_token_moved_without_a_call_is_reported() -> None:
    w = _world()
    w.holds["a"] = replace(w.holds["a"], token=5)
    found = commits_with_current_token(w.calls, w.snapshot(), NOW)
    assert [v.detail for v in found] == [
        "a has token 5, its commit answered 2",
        "a is stored committed with token 5, its audit log leaves it committed with token 2",
    ]


def test_a_missing_acknowledged_hold_is_reported() -> None:
    w = _world()
    del w.holds["c"]
    violations = acknowledged_writes_present(w.calls, w.snapshot(), NOW)
    assert {v.rule for v in violations} == {"acknowledged_writes_present"}
    assert all("c" in v.ids for v in violations)


def _set_status(w: World, hold_id: str, status: HoldStatus) -> None:
    w.holds[hold_id] = replace(w.holds[hold_id], status=status)


@pytest.mark.parametrize(
    ("what", "change"),
    [
        ("committed hold reverted", lambda w: _set_status(w, "a", HoldStatus.HELD)),
        ("released hold revived", lambda w: _set_status(w, "d", HoldStatus.HELD)),
        ("create record lost", lambda w: w.ledger.pop(0)),
        ("create not audited", lambda w: w.audit.pop(0)),
    ],
)  # fmt: skip
def test_a_lost_acknowledged_write_is_reported(what: str, change: Any) -> None:
    w = _world()
    change(w)
    _only("acknowledged_writes_present", acknowledged_writes_present(w.calls, w.snapshot(), NOW))


def test_a_committed_hold_released_later_is_fine() -> None:
    w = _world()
    a = replace(w.holds["a"], status=HoldStatus.RELEASED, token=3)
    w.holds["a"] = a
    w.act("release", a)
    assert check(w.calls, w.snapshot(), NOW) == []


def test_a_lease_freed_by_a_retryable_failure_needs_no_record() -> None:
    w = _world()
    w.ledger.pop()  # the execution's record
    w.calls = [c for c in w.calls if c.op != "complete" and (c.op, c.status) != ("acquire", 200)]
    _only("acknowledged_writes_present", acknowledged_writes_present(w.calls, w.snapshot(), NOW))
    w.call("complete", {"lease_token": "lease_1", "outcome": "failed_retryable"}, {"status": None},
           target="job")  # fmt: skip
    assert check(w.calls, w.snapshot(), NOW) == []


def test_a_lost_completion_is_reported() -> None:
    w = _world()
    w.ledger.pop()
    violations = acknowledged_writes_present(w.calls, w.snapshot(), NOW)
    assert {(v.rule, v.detail) for v in violations} == {
        ("acknowledged_writes_present", "the lease on key job has no record"),
        ("acknowledged_writes_present", "the completion of key job is not stored as answered"),
    }


def test_a_changed_replay_body_is_reported() -> None:
    w = _world()
    replay = w.calls[1]
    w.calls[1] = replace(replay, body=replay.body.replace(b'"title":"t"', b'"title":"T"'))
    found = _only("replays_identical", replays_identical(w.calls, w.snapshot(), NOW))
    assert found.ids == ("k-a",)


def test_a_changed_completion_replay_is_reported_but_leases_may_differ() -> None:
    w = _world()
    last = w.calls[-1]
    w.calls[-1] = replace(last, body=last.body.replace(b'"id":1', b'"id":2'))
    _only("replays_identical", replays_identical(w.calls, w.snapshot(), NOW))


def test_indeterminate_calls_never_blame() -> None:
    w = _world()
    w.call("create", {"workflow_id": "wf-z"}, {"status": None})
    w.call("commit", {"token": 1}, {"status": None}, target="nothing")
    w.call("release", {}, {"status": None}, target="b")
    w.call("acquire", {"tool": "send"}, {"status": None})
    assert check(w.calls, w.snapshot(), NOW) == []


def test_errors_are_not_acknowledgements() -> None:
    w = _world()
    w.call("create", {"workflow_id": "wf-z"}, _answer(409, b'{"type":"slot_conflict"}', "k-z"))
    w.call("commit", {"token": 1}, _answer(409, b"{}", "idem_commit_b"), target="b")
    assert check(w.calls, w.snapshot(), NOW) == []


def _lost_then_replayed(w: World, op: Any, hold: Hold, token: int | None = None) -> None:
    """``op`` whose first answer a crash cut off; its retry was answered as a replay."""
    body = encode(hold_document(hold, NOW))
    key = f"idem_{op}_{hold.id}"
    request = {} if token is None else {"token": token}
    w.call(op, request, _answer(None, b"", key), target=hold.id)
    w.call(op, request, _answer(200, body, key, replayed=True), target=hold.id)
    w.record(key, 200, body, hold_id=hold.id)
    w.log(f"hold.{op}", hold.id, key)


def test_a_change_acknowledged_only_by_a_replay_must_be_there() -> None:
    w = _world()
    e = _hold("e", "room-4")
    w.create(e)
    committed = replace(e, status=HoldStatus.COMMITTED, token=2, committed_at=NOW)
    _lost_then_replayed(w, "commit", committed, token=1)
    w.holds["e"] = committed
    assert check(w.calls, w.snapshot(), NOW) == []
    w.holds["e"] = e  # the store lost the commit the replay acknowledged
    found = _only(
        "acknowledged_writes_present", acknowledged_writes_present(w.calls, w.snapshot(), NOW)
    )
    assert found.ids == ("idem_commit_e", "e")


def test_a_create_acknowledged_only_by_a_replay_must_be_recorded_and_audited() -> None:
    w = _world()
    f = _hold("f", "room-5")
    body = encode(hold_document(f, NOW))
    w.call("create", {"workflow_id": f.workflow_id}, _answer(None, b"", "k-f"))
    w.create(f)
    w.calls[-1] = replace(
        w.calls[-1], headers={"Idempotency-Key": "k-f", "Idempotent-Replayed": "true"}
    )
    assert w.calls[-1].body == body
    assert check(w.calls, w.snapshot(), NOW) == []
    w.audit.pop()  # its audit entry lost
    _only("acknowledged_writes_present", acknowledged_writes_present(w.calls, w.snapshot(), NOW))


# Intent labels: every call of one label lands on one key and one effect.


def _label(w: World, intent: str, workflow: str) -> None:
    """Label every create of ``workflow`` with ``intent``."""
    w.calls = [
        replace(c, intent=intent) if c.request.get("workflow_id") == workflow else c
        for c in w.calls
    ]


def _rebook(w: World, hold_id: str, room: str) -> None:
    """A retry of ``wf-<hold_id>``'s create answered with a new hold under a new key:
    the fault (a rephrasing that derived another key)."""
    again = f"{hold_id}2"
    w.create(_hold(again, room, workflow_id=f"wf-{hold_id}", intent_fp=f"fp-{hold_id}"))


def test_an_intent_answered_under_two_keys_is_reported_only_when_labelled() -> None:
    w = _world()
    g = _hold("g", "room-7")
    w.create(g)
    w.holds["g"] = replace(g, status=HoldStatus.RELEASED, token=2)
    w.act("release", w.holds["g"])
    _rebook(w, "g", "room-7")
    assert check(w.calls, w.snapshot(), NOW) == []  # grouped by key, nothing shows
    _label(w, "book-g", "wf-g")
    found = check(w.calls, w.snapshot(), NOW)
    assert {v.rule for v in found} == {"one_key_per_intent"}
    assert sorted(v.ids for v in found) == [("book-g", "g", "g2"), ("book-g", "k-g", "k-g2")]
    keys = next(v.detail for v in found if "keys" in v.detail)
    first = next(i for i, c in enumerate(w.calls) if c.key == "k-g")
    assert "under 2 keys (2 of them stored): k-g answered g (fresh, first in call " in keys
    assert f"call {first} at 2030-10-01T08:59:12.500000Z)" in keys  # the client's clock
    holds = next(v.detail for v in found if "landed" in v.detail)
    assert holds.endswith(f"landed on 2 holds: g (fresh in call {first}), g2 (fresh in call "
                          f"{len(w.calls) - 1})")  # fmt: skip


def _lost(w: World, index: int) -> None:
    w.calls[index] = replace(w.calls[index], status=None, body=b"", headers={})


def test_an_intent_whose_first_answer_was_lost_must_not_land_twice() -> None:
    """The first create acted but its answer was lost; its hold expired; the retry
    (same label) booked a second hold under another key. No answer names the first."""
    w = _world()
    w.create(_hold("h", "room-8", expires_at=NOW))  # expired, as readers see it
    _lost(w, -1)
    _rebook(w, "h", "room-8")
    assert check(w.calls, w.snapshot(), NOW) == []
    _label(w, "book-h", "wf-h")
    found = _only("one_key_per_intent", check(w.calls, w.snapshot(), NOW))
    assert found.ids == ("book-h", "h", "h2")
    assert "h (inferred: its creating answer was lost), h2 (fresh in call" in found.detail


def _derived(hold: Hold, step: int | None) -> Hold:
    """``hold`` under the key the engine derives for it at ``step`` (no client key)."""
    intent = hold_intent(hold.attendees, Interval(hold.start, hold.end))
    key = derive_key(tenant=hold.tenant, workflow=hold.workflow_id, tool="create_calendar_hold",
                     intent=intent, step=step)  # fmt: skip
    return replace(hold, key=key)


def _lost_h_rebooked(w: World) -> Call:
    """Hold h (derived key, step 1) made by a call whose answer was lost, then
    booked again as h2: the fault of the test above, labelled. Returns the lost call."""
    w.create(_derived(_hold("h", "room-8", expires_at=NOW), 1), step=1)
    _lost(w, -1)
    lost = w.calls[-1]
    _rebook(w, "h", "room-8")
    _label(w, "book-h", "wf-h")
    return lost


@pytest.mark.parametrize("other", [None, "book-other"])
def test_a_hold_another_unanswered_call_may_have_made_is_not_blamed(other: str | None) -> None:
    w = _world()
    lost = _lost_h_rebooked(w)
    w.calls.append(replace(lost, intent=other))  # the same call, otherwise labelled
    assert check(w.calls, w.snapshot(), NOW) == []


@pytest.mark.parametrize(
    "change",
    [
        {"start": "2030-10-02T10:15:00Z", "end": "2030-10-02T10:45:00Z"},
        {"start": "2030-10-02T12:00:00+02:00", "end": "2030-10-02T12:45:00+02:00"},
        {"step": 3},
        {"workflow_id": "wf-other"},
        {"start": "2030-10-02T10:00:00"},  # naive: refused, made nothing
    ],
    ids=["start", "end", "step", "workflow", "invalid"],
)
def test_only_an_unanswered_call_that_asked_for_the_hold_may_have_made_it(
    change: dict[str, Any],
) -> None:
    w = _world()
    lost = _lost_h_rebooked(w)
    w.calls.append(replace(lost, request={**lost.request, **change}, intent="book-other"))
    found = _only("one_key_per_intent", check(w.calls, w.snapshot(), NOW))
    assert found.ids == ("book-h", "h", "h2")
    assert "(inferred: its creating answer was lost)" in found.detail


def test_an_unanswered_call_in_another_spelling_may_have_made_the_hold() -> None:
    w = _world()
    lost = _lost_h_rebooked(w)
    same = {"start": "2030-10-02T12:00:00+02:00", "duration_minutes": 30, "end": None}
    w.calls.append(replace(lost, request={**lost.request, **same}, intent="book-other"))
    assert check(w.calls, w.snapshot(), NOW) == []


def test_labels_are_held_apart_per_operation() -> None:
    """A create and the commit of its hold may share a label: their keys differ."""
    w = _world()
    on_a = [c for c in w.calls if "a" in (c.target, c.document().get("id"))]
    w.calls = [replace(c, intent="book-a") if c in on_a else c for c in w.calls]
    assert {c.op for c in w.calls if c.intent} == {"create", "commit"}
    assert check(w.calls, w.snapshot(), NOW) == []
    commit = next(c for c in w.calls if c.op == "commit")
    moved = {"Idempotency-Key": "idem_commit_a2", "Idempotent-Replayed": "true"}
    w.calls.append(replace(commit, headers=moved))  # the same answer, under another key
    found = _only("one_key_per_intent", check(w.calls, w.snapshot(), NOW))
    assert found.ids == ("book-a", "idem_commit_a", "idem_commit_a2")


def test_an_execution_label_keeps_its_key_across_takeovers() -> None:
    first = _lease_call("lease_1", "2030-10-01T09:00:30Z")
    takeover = _lease_call("lease_2", "2030-10-01T09:01:00Z")
    calls = [replace(first, intent="send"), replace(takeover, intent="send")]
    assert one_key_per_intent(calls, Snapshot(), NOW) == []
    moved = replace(calls[1], headers={**takeover.headers, "Idempotency-Key": "job3"})
    _only("one_key_per_intent", one_key_per_intent([calls[0], moved], Snapshot(), NOW))


# The audit log: token moves nobody was told of.


def _preempted_unseen(w: World) -> Hold:
    """Hold p (priority 10) preempted by q (90), whose answer was lost; q expired since."""
    p = _hold("p", "room-9", priority=10)
    w.create(p)
    w.create(_hold("q", "room-9", priority=90, expires_at=NOW), preempts=(p,))
    _lost(w, -1)
    w.holds["p"] = replace(p, status=HoldStatus.PREEMPTED, token=2, preempted_by="q")
    return p


def test_a_preemption_nobody_was_told_of_is_consistent() -> None:
    w = _world()
    _preempted_unseen(w)
    assert check(w.calls, w.snapshot(), NOW) == []


def test_a_commit_after_a_preemption_nobody_was_told_of_is_reported() -> None:
    w = _world()
    p = _preempted_unseen(w)
    committed = replace(p, status=HoldStatus.COMMITTED, token=2, committed_at=NOW)
    w.act("commit", committed, token=1)  # a buggy server took the token the owner knew
    w.holds["p"] = committed
    found = check(w.calls, w.snapshot(), NOW)
    assert {v.rule for v in found} == {"commits_with_current_token"}
    assert {v.ids for v in found} == {("p",)}
    details = sorted(v.detail for v in found)
    preempt, commit = (e.seq for e in w.audit if e.action in ("hold.preempt", "hold.commit")
                       and e.hold_id == "p")  # fmt: skip
    assert (
        details[0] == f"audit seq {commit} of acme: hold.commit of p, preempted since seq {preempt}"
    )
    assert "the audit log had moved it to token 2" in details[1]
    assert "its audit log leaves it committed with token 3" in details[2]
    w.audit = [e for e in w.audit if (e.action, e.hold_id) != ("hold.preempt", "p")]
    w.holds["p"] = replace(committed, token=2)
    assert commits_with_current_token(w.calls, w.snapshot(), NOW) == []  # it rests on the log


def test_an_unanswered_commit_after_a_preemption_blames_the_log_not_the_call() -> None:
    w = _world()
    p = _preempted_unseen(w)
    w.call("commit", {"token": 1}, {"status": None}, target="p")
    assert check(w.calls, w.snapshot(), NOW) == []  # refused, as it should be: nothing logged
    w.log("hold.commit", "p", "idem_commit_p")  # yet the log says it committed
    w.holds["p"] = replace(p, status=HoldStatus.COMMITTED, token=3, committed_at=NOW)
    found = _only("commits_with_current_token", check(w.calls, w.snapshot(), NOW))
    assert "hold.commit of p, preempted since" in found.detail


def test_a_hold_stored_unlike_its_audit_log_is_reported() -> None:
    w = _world()
    w.holds["d"] = replace(w.holds["d"], status=HoldStatus.HELD, token=1)  # release undone
    found = commits_with_current_token(w.calls, w.snapshot(), NOW)
    assert [v.detail for v in found] == [
        "d is stored held with token 1, its audit log leaves it released with token 2"
    ]


def test_a_commit_or_release_without_its_audit_entry_is_a_lost_write() -> None:
    for action in ("hold.commit", "hold.release"):
        w = _world()
        w.audit = [e for e in w.audit if e.action != action]
        found = _only(
            "acknowledged_writes_present", acknowledged_writes_present(w.calls, w.snapshot(), NOW)
        )
        assert found.detail.endswith("is not audited")


def test_a_hold_and_its_hold_create_entry_go_together() -> None:
    w = _world()
    w.holds["e"] = _hold("e", "room-5")  # stored, never logged
    found = _only("commits_with_current_token", check(w.calls, w.snapshot(), NOW))
    assert found.detail == "e of acme is stored, but the audit log never created it"
    del w.holds["e"]
    w.log("hold.create", "e", "client:k-e")  # logged, never stored
    found = _only("commits_with_current_token", check(w.calls, w.snapshot(), NOW))
    assert found.detail == f"audit seq {w.audit[-1].seq} of acme created e, which is not stored"
    w.log("hold.commit", "z", "idem_commit_z")  # moved, never created
    moved = commits_with_current_token(w.calls, w.snapshot(), NOW)
    assert (
        moved[0].detail == f"audit seq {w.audit[-1].seq} of acme: hold.commit of z, never created"
    )


@pytest.mark.parametrize("early", [False, True])
def test_a_hold_expired_before_its_expires_at_is_reported(early: bool) -> None:
    w = _world()
    e = _hold("e", "room-5", expires_at=NOW + timedelta(seconds=1) if early else NOW)
    w.create(e)
    w.log("hold.expire", "e")  # logged at NOW
    w.holds["e"] = replace(e, status=HoldStatus.EXPIRED)
    found = check(w.calls, w.snapshot(), NOW)
    if not early:
        assert found == []
        return
    seq = w.audit[-1].seq
    assert _only("commits_with_current_token", found).detail == (
        f"audit seq {seq} of acme: hold.expire of e at 2030-10-01T09:00:00Z, before its "
        "expires_at 2030-10-01T09:00:01Z"
    )


# Step drift (DESIGN 3): one intent at two steps of one workflow, two labels.


def _drift(w: World, gone: str, *, fp: str = "fp-x", workflow: str = "wf-x") -> None:
    """x1 booked at step 1 (label L1); the same intent at step 2 (label L2) answered
    with x1 as a replay under x1's key; x1 then ``gone`` (released, expired or
    preempted); L2 sent again books x2 under its own key. ``fp`` and ``workflow``
    are x1's, to fault it."""
    x1 = _derived(_hold("x1", "room-9", 10, workflow_id=workflow, intent_fp=fp), 1)
    body = w.create(x1, intent="L1", step=1)
    drifted = _request(x1, step=2, workflow_id="wf-x")
    w.call("create", drifted, _answer(201, body, x1.key, replayed=True), intent="L2")
    if gone == "released":
        w.holds["x1"] = replace(x1, status=HoldStatus.RELEASED, token=2)
        w.act("release", w.holds["x1"])
    elif gone == "expired":
        w.holds["x1"] = replace(x1, expires_at=NOW - timedelta(seconds=30))
    else:  # preempted by y (50), itself preempted by x2 (90) on the same slot
        y = _hold("y", "room-9", 50)
        w.create(y, preempts=(x1,))
        w.holds["x1"] = replace(x1, status=HoldStatus.PREEMPTED, token=2, preempted_by="y")
        w.holds["y"] = replace(y, status=HoldStatus.PREEMPTED, token=2, preempted_by="x2")
    x2 = _derived(_hold("x2", "room-9", 90, workflow_id="wf-x", intent_fp="fp-x"), 2)
    w.create(x2, intent="L2", step=2, preempts=(w.holds["y"],) if gone == "preempted" else ())


@pytest.mark.parametrize("gone", ["released", "expired", "preempted"])
def test_a_step_drift_replay_then_a_fresh_booking_is_consistent(gone: str) -> None:
    w = _world()
    _drift(w, gone)
    assert check(w.calls, w.snapshot(), NOW) == []


@pytest.mark.parametrize(
    "change", [{"fp": "fp-other"}, {"workflow": "wf-other"}], ids=["intent", "workflow"]
)
def test_a_replay_of_another_intent_or_workflow_is_no_step_drift(change: dict[str, str]) -> None:
    w = _world()
    _drift(w, "released", **change)
    found = check(w.calls, w.snapshot(), NOW)
    assert {v.rule for v in found} == {"one_key_per_intent"}
    x1, x2 = (w.holds[h].key for h in ("x1", "x2"))
    assert sorted(v.ids for v in found) == sorted([("L2", "x1", "x2"), ("L2", *sorted((x1, x2)))])
    keys = next(v.detail for v in found if "keys" in v.detail)
    assert f"{x1} answered x1 (replayed, first in call " in keys
    assert f"{x2} answered x2 (fresh, first in call " in keys


def test_a_drift_replay_of_a_hold_an_answer_showed_released_is_reported() -> None:
    w = _world()
    x1 = _derived(_hold("x1", "room-9", workflow_id="wf-x", intent_fp="fp-x"), 1)
    body = w.create(x1, intent="L1", step=1)
    w.holds["x1"] = replace(x1, status=HoldStatus.RELEASED, token=2)
    w.act("release", w.holds["x1"])
    released = len(w.calls) - 1
    w.call("create", _request(x1, step=2), _answer(201, body, x1.key, replayed=True), intent="L2")
    w.create(_derived(_hold("x2", "room-9", workflow_id="wf-x", intent_fp="fp-x"), 2),
             intent="L2", step=2)  # fmt: skip
    found = _only("one_key_per_intent", check(w.calls, w.snapshot(), NOW))
    assert found.detail == (
        f"create call {released + 1} of intent 'L2' of acme was answered with x1 as a step-drift "
        f"replay under {x1.key}, after call {released} had shown it released"
    )


def test_two_fresh_bookings_of_one_label_are_reported_even_beside_drift() -> None:
    w = _world()
    _drift(w, "released")
    # In another room, so that x2 and x3 are no double booking as well.
    x3 = _derived(_hold("x3", "room-8", 90, workflow_id="wf-x", intent_fp="fp-x",
                        status=HoldStatus.RELEASED, token=2), 3)  # fmt: skip
    w.create(x3, intent="L2", step=2)  # under a third key: a derivation fault
    w.log("hold.release", "x3", "idem_release_x3")  # released since, unanswered
    found = check(w.calls, w.snapshot(), NOW)
    assert {v.rule for v in found} == {"one_key_per_intent"}
    keys = tuple(sorted(w.holds[h].key for h in ("x2", "x3")))
    assert {v.ids for v in found} == {("L2", "x2", "x3"), ("L2", *keys)}


def test_replays_of_two_intents_under_two_keys_are_reported_without_a_hold_of_its_own() -> None:
    w = _world()
    for hold_id, fp in (("x1", "fp-x"), ("x2", "fp-y")):
        hold = _derived(_hold(hold_id, f"room-{hold_id}", workflow_id="wf-x", intent_fp=fp), 1)
        body = w.create(hold, intent=f"L-{hold_id}", step=1)
        w.call("create", _request(hold, step=2), _answer(201, body, hold.key, replayed=True),
               intent="L2")  # fmt: skip
    found = check(w.calls, w.snapshot(), NOW)
    assert {v.rule for v in found} == {"one_key_per_intent"}
    assert {v.ids[:3] for v in found} == {("L2", "x1", "x2"), ("L2", *sorted(
        w.holds[h].key for h in ("x1", "x2")))}  # fmt: skip


def test_a_commit_waiting_for_approval_acknowledges_nothing_until_it_commits() -> None:
    """202s under a commit's key, then its 200: one fresh commit, replays unharmed.

    A 202 (a person must approve first) is recorded under no key: the same call
    later commits. Taken as an acknowledged write, each 202 would read as a
    second fresh answer, a missing commit and a replay that changed.
    """
    w = World()
    e = _hold("e", "room-5")
    w.create(e)
    waiting = encode({"outcome": "approval_required", "approval": {"id": "appr_1"}})
    for _ in range(2):
        w.call("commit", {"token": 1}, _answer(202, waiting, "idem_commit_e"), target="e")
    assert check(w.calls, w.snapshot(), NOW) == []  # the hold is still held: nothing lost
    w.holds["e"] = replace(e, status=HoldStatus.COMMITTED, token=2, committed_at=NOW)
    w.act("commit", w.holds["e"], token=1)
    assert check(w.calls, w.snapshot(), NOW) == []
    w.calls[-1] = replace(w.calls[-1], status=202)  # a "commit" that never did: a lost write
    assert [v.rule for v in check(w.calls, w.snapshot(), NOW)] == ["commits_with_current_token"]
