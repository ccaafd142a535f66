"""The write use cases on the in-memory fakes: place, commit, release, expire.

Each call runs in its own ``InMemoryUnitOfWork`` over one shared ``State``, as
the store would run it; time moves only when a test advances the clock.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from slotward.api.http.statuses import status_of
from slotward.engine.clock import FixedClock
from slotward.engine.errors import (
    Conflict,
    Forbidden,
    NotFound,
    SlotConflict,
    ValidationFailed,
)
from slotward.engine.fakes import InMemoryUnitOfWork, SequentialIds, State
from slotward.engine.model import AuditEntry, Hold, HoldStatus, Principal, Reply
from slotward.engine.rules.attendees import attendee_id_for_email, parse_attendees
from slotward.engine.rules.audit import verify_chain
from slotward.engine.rules.fingerprint import child_key, derive_key, hold_intent
from slotward.engine.rules.policy import Policy
from slotward.engine.rules.timenorm import normalize_interval
from slotward.engine.usecases.lifecycle import HoldAction, commit_hold, expire_due, release_hold
from slotward.engine.usecases.placing import HoldRequest, lookup_replay, place_hold

T0 = datetime(2030, 10, 1, 9, 0, tzinfo=UTC)
TENANT = "acme"
ALICE = Principal(TENANT, "agent-alice", "agent", 50)
BOB = Principal(TENANT, "agent-bob", "agent", 50)
BOSS = Principal(TENANT, "agent-boss", "agent", 90)
ADMIN = Principal(TENANT, "ops", "admin", 0)
OUTSIDER = Principal("globex", "agent-alice", "admin", 50)
TTL = 300
OVERLAP = "2030-10-01T10:15:00Z"  # overlaps the default 10:00-10:30 slot, another intent


@dataclass
class World:
    state: State = field(default_factory=State)
    clock: FixedClock = field(default_factory=lambda: FixedClock(T0))
    ids: SequentialIds = field(default_factory=SequentialIds)
    policy: Policy = field(default_factory=Policy)

    def uow(self) -> InMemoryUnitOfWork:
        return InMemoryUnitOfWork(self.state)

    def place(self, req: HoldRequest) -> Reply:
        return place_hold(self.uow(), req, self.policy, self.clock, self.ids)

    def commit(self, principal: Principal, hold_id: str, token: int | None) -> Reply:
        action = HoldAction(principal, hold_id, token=token)
        return commit_hold(self.uow(), action, self.policy, self.clock, self.ids)

    def release(self, principal: Principal, hold_id: str) -> Reply:
        action = HoldAction(principal, hold_id)
        return release_hold(self.uow(), action, self.policy, self.clock, self.ids)

    def expire(self) -> int:
        return expire_due(self.uow(), self.clock, self.ids)

    def hold(self, hold_id: str | None) -> Hold:
        assert hold_id is not None
        return self.state.holds[(TENANT, hold_id)]

    def snapshot(self) -> State:
        return copy.deepcopy(self.state)

    def audit(self) -> list[AuditEntry]:
        return self.state.audit.get(TENANT, [])


@pytest.fixture
def world() -> World:
    return World()


def request(
    principal: Principal = ALICE,
    *,
    workflow: str = "wf-1",
    step: int | None = None,
    attendees: tuple[str, ...] = ("bob@example.com",),
    start: str = "2030-10-01T10:00:00Z",
    minutes: int = 30,
    title: str = "Sync",
    priority: int | None = None,
    ttl: int = TTL,
    client_key: str | None = None,
) -> HoldRequest:
    return HoldRequest(
        principal=principal,
        workflow_id=workflow,
        step=step,
        attendees=parse_attendees(list(attendees)),
        interval=normalize_interval(start=start, duration_minutes=minutes),
        title=title,
        description=None,
        priority=principal.priority if priority is None else priority,
        ttl_seconds=ttl,
        client_key=client_key,
    )


def derived_key(req: HoldRequest, emails: tuple[str, ...] = ("bob@example.com",)) -> str:
    ids = [attendee_id_for_email(req.principal.tenant, e) for e in emails]
    return derive_key(
        tenant=req.principal.tenant,
        workflow=req.workflow_id,
        tool="create_calendar_hold",
        intent=hold_intent(ids, req.interval),
        step=req.step,
    )


def doc(reply: Reply) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(reply.body)
    return body


def conflict_of(world: World, req: HoldRequest) -> SlotConflict:
    with pytest.raises(SlotConflict) as info:
        world.place(req)
    return info.value


# place_hold: fresh, replay


def test_a_fresh_create_writes_hold_record_audit_and_event_together(world: World) -> None:
    req = request()
    reply = world.place(req)

    assert reply.created is True
    assert reply.replayed is False
    assert reply.key == derived_key(req)
    hold = world.hold(reply.hold_id)
    assert hold.status is HoldStatus.HELD
    assert hold.token == 1
    assert hold.key == reply.key
    assert hold.agent_id == ALICE.agent_id
    assert hold.attendees == (attendee_id_for_email(TENANT, "bob@example.com"),)
    assert hold.expires_at == T0 + timedelta(seconds=TTL)
    assert doc(reply)["status"] == "held"
    assert doc(reply)["id"] == hold.id

    record = world.state.ledger[(TENANT, reply.key)]
    assert (record.state, record.created, record.body) == ("succeeded", True, reply.body)
    assert record.hold_id == hold.id
    assert record.expires_at == T0 + world.policy.retention

    [entry] = world.audit()
    assert (entry.action, entry.outcome, entry.key, entry.hold_id, entry.actor) == (
        "hold.create",
        "fresh",
        reply.key,
        hold.id,
        ALICE.agent_id,
    )
    assert hold.audit_seq == entry.seq

    [event] = world.state.outbox
    assert (event.type, event.hold_id, event.tenant) == ("hold.created", hold.id, TENANT)
    assert event.payload["hold"]["status"] == "held"


def test_an_identical_call_replays_and_writes_nothing(world: World) -> None:
    first = world.place(request())
    before = world.snapshot()
    world.clock.advance(30)

    again = world.place(request())

    assert again == Reply(
        created=True,
        body=first.body,
        key=first.key,
        replayed=True,
        hold_id=first.hold_id,
        workflow_id=first.workflow_id,
        hold_status="held",
    )
    assert world.state == before


def test_a_rephrased_title_is_the_same_intent(world: World) -> None:
    first = world.place(request(title="Sync"))
    again = world.place(request(title="Quick sync, rescheduled"))
    assert (again.replayed, again.body, again.key) == (True, first.body, first.key)
    assert len(world.state.holds) == 1


def test_lookup_replay_finds_the_stored_answer_and_nothing_else(world: World) -> None:
    first = world.place(request())
    before = world.snapshot()
    found = lookup_replay(world.uow(), request(), world.policy, world.clock)
    assert found.reply == Reply(
        created=True,
        body=first.body,
        key=first.key,
        replayed=True,
        hold_id=first.hold_id,
        workflow_id=first.workflow_id,
        hold_status="held",
    )
    assert found.key == first.key
    other = lookup_replay(world.uow(), request(minutes=45), world.policy, world.clock)
    assert other.reply is None
    assert other.key.startswith("idem_")
    assert other.key != first.key
    assert world.state == before


# place_hold: validation


def test_a_start_in_the_past_is_refused_and_nothing_is_written(world: World) -> None:
    before = world.snapshot()
    with pytest.raises(ValidationFailed) as info:
        world.place(request(start="2030-10-01T08:59:59Z"))
    assert info.value.code == "start_in_past"
    assert status_of(info.value) == 422
    assert world.state == before


def test_a_hold_longer_than_24_hours_is_refused(world: World) -> None:
    before = world.snapshot()
    with pytest.raises(ValidationFailed) as info:
        world.place(request(minutes=24 * 60 + 1))
    assert info.value.code == "hold_too_long"
    assert world.state == before


def test_a_hold_of_exactly_24_hours_is_accepted(world: World) -> None:
    assert world.place(request(minutes=24 * 60)).created is True


def test_a_client_key_reused_for_another_call_is_refused(world: World) -> None:
    first = world.place(request(client_key="order-42"))
    assert first.key == "order-42"
    before = world.snapshot()

    with pytest.raises(ValidationFailed) as info:
        world.place(request(client_key="order-42", start="2030-10-01T11:00:00Z"))
    assert info.value.code == "idempotency_key_reused"
    assert world.state == before

    again = world.place(request(client_key="order-42"))
    assert (again.replayed, again.body, again.key) == (True, first.body, "order-42")


# place_hold: step drift and re-booking


def test_step_drift_while_live_replays_with_the_live_holds_key(world: World) -> None:
    first = world.place(request(step=3))
    before = world.snapshot()

    drifted = request(step=4)
    again = world.place(drifted)

    assert again == Reply(
        created=True,
        body=first.body,
        key=first.key,
        replayed=True,
        hold_id=first.hold_id,
        workflow_id=first.workflow_id,
        hold_status="held",
    )
    assert again.key != derived_key(drifted)
    assert (TENANT, derived_key(drifted)) not in world.state.ledger
    assert world.state == before


def test_step_drift_after_commit_still_replays(world: World) -> None:
    first = world.place(request(step=3))
    world.commit(ALICE, str(first.hold_id), 1)
    again = world.place(request(step=9))
    assert (again.replayed, again.key, again.hold_id) == (True, first.key, first.hold_id)


def test_after_release_a_new_step_books_a_new_hold(world: World) -> None:
    first = world.place(request(step=3))
    world.release(ALICE, str(first.hold_id))

    rebooked = world.place(request(step=4))

    assert rebooked.created is True
    assert rebooked.replayed is False
    assert rebooked.hold_id != first.hold_id
    assert world.hold(rebooked.hold_id).status is HoldStatus.HELD


def test_after_release_the_same_step_still_gets_its_first_answer(world: World) -> None:
    first = world.place(request(step=3))
    world.release(ALICE, str(first.hold_id))
    late = world.place(request(step=3))
    assert (late.replayed, late.body, late.hold_id) == (True, first.body, first.hold_id)


# place_hold: conflicts


def test_a_conflict_writes_only_an_audit_entry_and_raises(world: World) -> None:
    world.place(request(ALICE))
    world.clock.advance(100)
    before = world.snapshot()

    req = request(BOB, workflow="wf-bob")
    error = conflict_of(world, req)

    assert error.code == "slot_conflict"
    assert status_of(error) == 409
    assert error.idempotency_key == derived_key(req)
    assert error.retryable is True
    assert error.retry_after == TTL - 100
    [conflict] = error.extra["conflicts"]
    assert conflict["kind"] == "held"
    assert conflict["agent"] == ALICE.agent_id
    assert conflict["same_intent"] is True
    alternatives = error.extra["alternatives"]
    assert 1 <= len(alternatives) <= 3
    for alt in alternatives:
        s = datetime.fromisoformat(alt["start"])
        e = datetime.fromisoformat(alt["end"])
        assert e - s == timedelta(minutes=30)
        assert s > world.clock.now()
        assert e <= req.interval.start or s >= req.interval.end

    # Nothing but one audit entry with the outcome "conflict".
    assert world.state.holds == before.holds
    assert world.state.ledger == before.ledger
    assert world.state.outbox == before.outbox
    assert world.state.attendees == before.attendees
    assert world.state.emails == before.emails
    assert world.audit()[:-1] == before.audit[TENANT]
    entry = world.audit()[-1]
    assert (entry.action, entry.outcome, entry.key, entry.hold_id, entry.actor) == (
        "hold.create",
        "conflict",
        error.idempotency_key,
        None,
        BOB.agent_id,
    )


def test_a_conflict_is_not_stored_and_the_same_call_runs_again_later(world: World) -> None:
    first = world.place(request(ALICE))
    conflict_of(world, request(BOB, workflow="wf-bob"))
    world.release(ALICE, str(first.hold_id))

    retried = world.place(request(BOB, workflow="wf-bob"))

    assert (retried.created, retried.replayed) == (True, False)


def test_a_committed_hold_conflict_is_not_retryable(world: World) -> None:
    first = world.place(request(ALICE, attendees=("bob@example.com", "carol@example.com")))
    world.commit(ALICE, str(first.hold_id), 1)
    error = conflict_of(world, request(BOSS, workflow="wf-boss", start=OVERLAP))
    assert {c["kind"] for c in error.extra["conflicts"]} == {"committed"}
    assert error.retryable is False
    assert error.retry_after is None


# place_hold: preemption


def test_a_higher_priority_claim_preempts_a_held_hold(world: World) -> None:
    loser = world.place(request(ALICE))
    world.clock.advance(10)
    now = world.clock.now()

    winner = world.place(request(BOSS, workflow="wf-boss", start=OVERLAP))

    assert (winner.created, winner.replayed) == (True, False)
    lost = world.hold(loser.hold_id)
    assert lost.status is HoldStatus.PREEMPTED
    assert lost.preempted_by == winner.hold_id
    assert lost.token == 2
    assert lost.updated_at == now
    assert world.hold(winner.hold_id).status is HoldStatus.HELD

    preempted = [e for e in world.state.outbox if e.type == "hold.preempted"]
    assert len(preempted) == 1
    assert preempted[0].hold_id == loser.hold_id
    assert preempted[0].payload["preempted_by"] == winner.hold_id
    assert preempted[0].payload["hold"]["status"] == "preempted"

    actions = [(e.action, e.hold_id, e.outcome) for e in world.audit()]
    assert ("hold.preempt", loser.hold_id, "preempted") in actions
    assert actions[-1] == ("hold.create", winner.hold_id, "fresh")


def test_the_losers_commit_then_fails_hold_preempted(world: World) -> None:
    loser = world.place(request(ALICE))
    world.place(request(BOSS, workflow="wf-boss", start=OVERLAP))
    before = world.snapshot()
    for token in (1, 2):
        with pytest.raises(Conflict) as info:
            world.commit(ALICE, str(loser.hold_id), token)
        assert info.value.code == "hold_preempted"
    assert world.state == before


def test_equal_priority_does_not_preempt(world: World) -> None:
    first = world.place(request(ALICE))
    error = conflict_of(world, request(BOB, workflow="wf-bob", start=OVERLAP))
    assert [c["same_intent"] for c in error.extra["conflicts"]] == [False]
    assert world.hold(first.hold_id).status is HoldStatus.HELD


def test_the_same_intent_from_another_workflow_is_not_preempted(world: World) -> None:
    first = world.place(request(ALICE))
    error = conflict_of(world, request(BOSS, workflow="wf-boss"))
    assert [c["same_intent"] for c in error.extra["conflicts"]] == [True]
    assert world.hold(first.hold_id).status is HoldStatus.HELD


# commit_hold


def test_commit_makes_the_hold_committed_and_bumps_the_token(world: World) -> None:
    placed = world.place(request())
    world.clock.advance(20)
    reply = world.commit(ALICE, str(placed.hold_id), 1)

    assert (reply.created, reply.replayed) == (False, False)
    assert reply.key == child_key(placed.key, "commit")
    hold = world.hold(placed.hold_id)
    assert hold.status is HoldStatus.COMMITTED
    assert hold.token == 2
    assert hold.committed_at == world.clock.now()
    assert doc(reply)["status"] == "committed"
    assert world.state.outbox[-1].type == "hold.committed"
    assert world.audit()[-1].action == "hold.commit"
    assert world.state.ledger[(TENANT, reply.key)].body == reply.body


def test_a_repeated_commit_replays_identical_bytes(world: World) -> None:
    placed = world.place(request())
    first = world.commit(ALICE, str(placed.hold_id), 1)
    before = world.snapshot()
    world.clock.advance(3600)

    again = world.commit(ALICE, str(placed.hold_id), 1)

    assert again == Reply(
        created=False, body=first.body, key=first.key, replayed=True,
        hold_id=first.hold_id, workflow_id=first.workflow_id,
        hold_status="committed",
    )  # fmt: skip
    assert world.state == before


def test_a_stale_token_is_refused_and_nothing_is_written(world: World) -> None:
    placed = world.place(request())
    before = world.snapshot()
    for stale in (0, 2, None):
        with pytest.raises(Conflict) as info:
            world.commit(ALICE, str(placed.hold_id), stale)
        assert info.value.code == "token_mismatch"
        assert info.value.retryable is False
    assert world.state == before


def test_only_the_owner_may_commit(world: World) -> None:
    placed = world.place(request())
    before = world.snapshot()
    for other in (BOB, ADMIN):
        with pytest.raises(Forbidden) as info:
            world.commit(other, str(placed.hold_id), 1)
        assert info.value.code == "not_hold_owner"
    assert world.state == before


def test_a_late_commit_succeeds_while_the_slot_is_free(world: World) -> None:
    placed = world.place(request())
    world.clock.advance(TTL + 1)

    reply = world.commit(ALICE, str(placed.hold_id), 1)

    assert reply.created is False
    hold = world.hold(placed.hold_id)
    assert (hold.status, hold.token) == (HoldStatus.COMMITTED, 2)


def test_a_late_commit_after_the_sweep_succeeds_with_the_original_token(world: World) -> None:
    placed = world.place(request())
    world.clock.advance(TTL)
    world.expire()

    reply = world.commit(ALICE, str(placed.hold_id), 1)

    assert doc(reply)["status"] == "committed"
    assert world.hold(placed.hold_id).status is HoldStatus.COMMITTED


def test_a_late_commit_fails_when_another_hold_took_the_slot(world: World) -> None:
    placed = world.place(request(ALICE))
    world.clock.advance(TTL + 1)
    taken = world.place(request(BOB, workflow="wf-bob", start=OVERLAP))
    assert taken.created is True
    before = world.snapshot()

    with pytest.raises(Conflict) as info:
        world.commit(ALICE, str(placed.hold_id), 1)

    assert info.value.code == "hold_expired"
    assert world.state == before


# release_hold


def test_the_owner_releases_and_frees_the_slot(world: World) -> None:
    placed = world.place(request(ALICE))
    reply = world.release(ALICE, str(placed.hold_id))

    assert (reply.created, reply.replayed) == (False, False)
    assert reply.key == child_key(placed.key, "release")
    hold = world.hold(placed.hold_id)
    assert (hold.status, hold.token) == (HoldStatus.RELEASED, 2)
    assert world.state.outbox[-1].type == "hold.released"
    assert world.audit()[-1].action == "hold.release"
    assert world.place(request(BOB, workflow="wf-bob")).created is True


def test_releasing_twice_is_a_replay(world: World) -> None:
    placed = world.place(request())
    first = world.release(ALICE, str(placed.hold_id))
    before = world.snapshot()
    again = world.release(ALICE, str(placed.hold_id))
    assert again == Reply(
        created=False, body=first.body, key=first.key, replayed=True,
        hold_id=first.hold_id, workflow_id=first.workflow_id,
        hold_status="released",
    )  # fmt: skip
    assert world.state == before


def test_an_admin_of_the_same_tenant_may_release(world: World) -> None:
    placed = world.place(request(ALICE))
    reply = world.release(ADMIN, str(placed.hold_id))
    assert doc(reply)["status"] == "released"
    assert world.audit()[-1].actor == ADMIN.agent_id


def test_another_agent_may_not_release(world: World) -> None:
    placed = world.place(request(ALICE))
    before = world.snapshot()
    with pytest.raises(Forbidden) as info:
        world.release(BOB, str(placed.hold_id))
    assert info.value.code == "not_hold_owner"
    assert world.state == before


def test_releasing_an_expired_hold_makes_it_final(world: World) -> None:
    placed = world.place(request())
    world.clock.advance(TTL + 1)

    reply = world.release(ALICE, str(placed.hold_id))

    assert reply.created is False
    assert doc(reply)["status"] == "released"
    assert doc(reply)["token"] == 2
    assert [e.type for e in world.state.outbox][-1] == "hold.released"
    with pytest.raises(Conflict) as info:
        world.commit(ALICE, str(placed.hold_id), 1)
    assert info.value.code == "hold_released"


def test_releasing_a_preempted_hold_answers_as_it_is(world: World) -> None:
    placed = world.place(request(ALICE))
    world.place(request(BOSS, workflow="wf-boss", start=OVERLAP))
    before = world.snapshot()

    reply = world.release(ALICE, str(placed.hold_id))

    assert (reply.created, doc(reply)["status"]) == (False, "preempted")
    assert world.state.holds == before.holds
    assert world.state.outbox == before.outbox


# tenants


def test_a_hold_of_another_tenant_is_not_found(world: World) -> None:
    placed = world.place(request(ALICE))
    before = world.snapshot()
    with pytest.raises(NotFound) as committing:
        world.commit(OUTSIDER, str(placed.hold_id), 1)
    with pytest.raises(NotFound) as releasing:
        world.release(OUTSIDER, str(placed.hold_id))
    assert committing.value.code == releasing.value.code == "hold_not_found"
    assert world.state == before


def test_tenants_have_separate_audit_chains(world: World) -> None:
    world.place(request(ALICE))
    world.place(request(Principal("globex", "agent-g", "agent", 50)))
    assert [e.seq for e in world.state.audit[TENANT]] == [1]
    assert [e.seq for e in world.state.audit["globex"]] == [1]


# expire_due


def test_expire_due_marks_due_holds_expired_and_keeps_the_token(world: World) -> None:
    due = world.place(request(ttl=60))
    later = world.place(request(ttl=600, start="2030-10-01T12:00:00Z"))
    world.clock.advance(120)

    assert world.expire() == 1

    expired = world.hold(due.hold_id)
    assert expired.status is HoldStatus.EXPIRED
    assert expired.token == 1
    assert expired.updated_at == world.clock.now()
    assert world.hold(later.hold_id).status is HoldStatus.HELD


def test_expire_due_emits_and_audits(world: World) -> None:
    due = world.place(request(ttl=60))
    world.clock.advance(60)

    world.expire()

    event = world.state.outbox[-1]
    assert (event.type, event.hold_id) == ("hold.expired", due.hold_id)
    assert event.payload["hold"]["status"] == "expired"
    entry = world.audit()[-1]
    assert (entry.action, entry.actor, entry.outcome, entry.hold_id, entry.key) == (
        "hold.expire",
        "system",
        "expired",
        due.hold_id,
        None,
    )


def test_a_second_sweep_finds_nothing_to_do(world: World) -> None:
    world.place(request(ttl=60))
    world.clock.advance(61)
    world.expire()
    before = world.snapshot()

    assert world.expire() == 0
    assert world.state == before


def test_expire_due_leaves_held_and_committed_holds_alone(world: World) -> None:
    committed = world.place(request(ttl=60))
    world.commit(ALICE, str(committed.hold_id), 1)
    world.place(request(ttl=600, start="2030-10-01T12:00:00Z"))
    world.clock.advance(120)
    before = world.snapshot()

    assert world.expire() == 0
    assert world.state == before


# rollback


class IdsThatRunOutOfEvents(SequentialIds):
    """An id generator that fails when asked for an event id: a crash mid-transaction."""

    def new_id(self, prefix: str) -> str:
        if prefix == "evt":
            raise RuntimeError("id service unavailable")
        return super().new_id(prefix)


def test_a_failing_place_leaves_the_state_untouched(world: World) -> None:
    world.place(request(ALICE))
    before = world.snapshot()
    world.ids = IdsThatRunOutOfEvents()

    # The preemption writes the loser, an audit entry and then needs an event id.
    with pytest.raises(RuntimeError):
        world.place(request(BOSS, workflow="wf-boss", start=OVERLAP))

    assert world.state == before


def test_a_failing_commit_leaves_the_state_untouched(world: World) -> None:
    placed = world.place(request())
    before = world.snapshot()
    world.ids = IdsThatRunOutOfEvents()

    with pytest.raises(RuntimeError):
        world.commit(ALICE, str(placed.hold_id), 1)

    assert world.state == before
    world.ids = SequentialIds()
    assert world.commit(ALICE, str(placed.hold_id), 1).created is False


def test_the_audit_chain_of_a_busy_day_verifies(world: World) -> None:
    first = world.place(request(ALICE))
    conflict_of(world, request(BOB, workflow="wf-bob"))
    world.place(request(BOSS, workflow="wf-boss", start=OVERLAP))
    second = world.place(request(ALICE, workflow="wf-2", start="2030-10-01T14:00:00Z"))
    world.commit(ALICE, str(second.hold_id), 1)
    world.release(ALICE, str(first.hold_id))
    world.clock.advance(TTL)
    world.expire()

    check = verify_chain(world.audit())
    assert check.ok
    assert check.count == len(world.audit()) >= 6
    assert check.head == world.audit()[-1].hash
