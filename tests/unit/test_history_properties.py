"""The history checker against histories the engine really makes, and faults put into them.

A history is made by running the engine's use cases on the in-memory fakes
over a random sequence of operations: creates (some reworded, some sent again,
some by a higher priority that preempts), commits with the token the client
last saw or a stale one, releases by the owner or an admin, waits past expiries
and leases, sweeps, and executions acquired and completed. Each call is
recorded as HTTP would answer it: a ``Reply`` through the API's own
``reply_response``, an error through its problem middleware. Some answers are
lost on the way (the engine acted, the client saw nothing), and the client
carries on without them. The snapshot is the fake store's final state.

Such a history must pass :func:`check`. Then one fault is put in, and the rule
it breaks must report it. A few fixed operations close every history, so each
fault has a place to go.

Step drift is not generated: a call whose step drifted is answered with the
live hold of its intent, and sent again once that hold is gone it books anew,
under its own key (DESIGN 3). An intent label cannot span it (see
``slotward.engine.history_intents``).
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request
from hypothesis import given, settings
from hypothesis import strategies as st

from slotward.api.calls import reply_response
from slotward.api.problems import problem_middleware
from slotward.engine.attendees import parse_attendees
from slotward.engine.audit import GENESIS, next_entry
from slotward.engine.clock import FixedClock
from slotward.engine.errors import SlotwardError
from slotward.engine.executions import (
    Completion,
    ExecutionRequest,
    Outcome,
    acquire,
    complete,
    lookup_execution,
)
from slotward.engine.fakes import InMemoryUnitOfWork, SequentialIds, State
from slotward.engine.history import Call, Op, Snapshot, check
from slotward.engine.lifecycle import HoldAction, commit_hold, expire_due, release_hold
from slotward.engine.model import AuditEntry, HoldStatus, Principal, Reply
from slotward.engine.placing import HoldRequest, lookup_replay, place_hold
from slotward.engine.policy import Policy
from slotward.engine.timenorm import normalize_interval

T0 = datetime(2030, 10, 1, 9, 0, tzinfo=UTC)
TENANT = "acme"
AGENTS = tuple(Principal(TENANT, f"agent-{p}", "agent", p) for p in (10, 50, 90))
ADMIN = Principal(TENANT, "ops", "admin", 0)
ROOMS = ("room-1@example.com", "room-2@example.com")
STARTS = ("10:00", "10:15", "10:30", "10:45")  # 30 minutes each: neighbours overlap

# --- operations -------------------------------------------------------------


@dataclass(frozen=True)
class Create:
    agent: int
    workflow: int
    room: int
    start: int
    ttl: int
    labelled: bool


@dataclass(frozen=True)
class Again:
    """An earlier create sent again (a retry, a duplicate), reworded every other time."""

    pick: int


@dataclass(frozen=True)
class Outbid:
    """The highest priority claims a slot overlapping a hold the clients were told of."""

    pick: int


@dataclass(frozen=True)
class CommitOp:
    pick: int  # of the holds the client was told of
    stale: bool  # one less than the token it last saw


@dataclass(frozen=True)
class ReleaseOp:
    pick: int
    by_admin: bool


@dataclass(frozen=True)
class Wait:
    seconds: int


@dataclass(frozen=True)
class Sweep:
    pass


@dataclass(frozen=True)
class AcquireOp:
    n: int
    lease: int


@dataclass(frozen=True)
class CompleteOp:
    pick: int  # of the leases the client was granted
    outcome: Outcome


Operation = Create | Again | Outbid | CommitOp | ReleaseOp | Wait | Sweep | AcquireOp | CompleteOp

OUTCOMES: tuple[Outcome, ...] = ("succeeded", "failed_terminal", "failed_retryable")
_picks = st.integers(0, 50)
_creates = st.builds(Create, st.integers(0, 2), st.integers(0, 3), st.integers(0, 1),
                     st.integers(0, 2), st.sampled_from([60, 300]), st.booleans())  # fmt: skip
# Creates weigh most: they make the conflicts, preemptions and replays.
OPERATIONS: st.SearchStrategy[Operation] = st.one_of(
    _creates, _creates, _creates,
    st.builds(Again, _picks), st.builds(Again, _picks), st.builds(Outbid, _picks),
    st.builds(CommitOp, _picks, st.booleans()), st.builds(CommitOp, _picks, st.booleans()),
    st.builds(ReleaseOp, _picks, st.booleans()),
    st.builds(Wait, st.sampled_from([5, 40, 200, 400])),
    st.just(Sweep()),
    st.builds(AcquireOp, st.integers(0, 2), st.sampled_from([10, 30])),
    st.builds(CompleteOp, _picks, st.sampled_from(OUTCOMES)),
)  # fmt: skip
# A step: an operation, and whether its answer is lost on the way back (1 in 8).
Step = tuple[Operation, bool]
STEPS = st.lists(
    st.tuples(OPERATIONS, st.integers(0, 7).map(lambda n: n == 0)), min_size=4, max_size=30
)

# They close every history, so that each fault has a place to go: two fresh
# holds in workflows and rooms nothing else uses, a replay, a commit.
CLOSING: tuple[Step, ...] = (
    (Create(0, 8, 8, 0, 300, True), False),
    (Again(-1), False),
    (Create(1, 9, 9, 1, 300, True), False),
    (CommitOp(-1, False), False),
)


# --- running and recording --------------------------------------------------


async def _problem(error: SlotwardError) -> web.StreamResponse:
    """The response the API's one error middleware makes of ``error``."""

    async def handler(request: web.Request) -> web.StreamResponse:
        raise error

    return await problem_middleware(make_mocked_request("POST", "/"), handler)


@dataclass
class Client:
    """Runs operations against the engine; records every call as HTTP would answer it."""

    runner: asyncio.Runner
    state: State = field(default_factory=State)
    clock: FixedClock = field(default_factory=lambda: FixedClock(T0))
    ids: SequentialIds = field(default_factory=SequentialIds)
    policy: Policy = field(default_factory=Policy)
    calls: list[Call] = field(default_factory=list)
    creates: list[tuple[Create, str | None]] = field(default_factory=list)
    holds: dict[str, dict[str, Any]] = field(default_factory=dict)  # as last answered
    made: dict[str, Create] = field(default_factory=dict)  # which create a hold answered
    leases: list[tuple[Principal, dict[str, Any]]] = field(default_factory=list)

    def uow(self) -> InMemoryUnitOfWork:
        return InMemoryUnitOfWork(self.state)

    def send(self, op: Op, who: Principal, request: dict[str, Any], run: Callable[[], Reply],
             lost: bool, target: str | None = None, intent: str | None = None) -> Call:  # fmt: skip
        try:
            response: web.StreamResponse = reply_response(run())
        except SlotwardError as error:
            response = self.runner.run(_problem(error))
        assert isinstance(response, web.Response)
        assert isinstance(response.body, bytes)
        at = float(len(self.calls))  # the client's clock: one call after the other
        status: int | None = response.status
        body, headers = response.body, dict(response.headers)
        if lost:  # the engine acted; the answer never arrived
            status, body, headers = None, b"", {}
        call = Call(op, TENANT, who.agent_id, request, status, body, headers, target,
                    invoked_at=at, completed_at=at + 0.5, intent=intent)  # fmt: skip
        self.calls.append(call)
        if call.ok and op in ("create", "commit", "release"):
            self.holds[str(call.document()["id"])] = call.document()
        if call.status == 201 and op == "acquire":
            self.leases.append((who, call.document()))
        return call

    def snapshot(self) -> Snapshot:
        chains = [entry for chain in self.state.audit.values() for entry in chain]
        holds, ledger = self.state.holds.values(), self.state.ledger.values()
        return Snapshot(tuple(holds), tuple(ledger), tuple(chains))


def create_body(op: Create, reworded: bool) -> dict[str, Any]:
    room = ROOMS[op.room] if op.room < len(ROOMS) else f"room-{op.room}@example.com"
    start = STARTS[op.start]
    body: dict[str, Any] = {
        "workflow_id": f"wf-{op.workflow}",
        "attendees": [room],
        "start": f"2030-10-02T{start}:00Z",
        "duration_minutes": 30,
        "title": "sync",
        "hold_ttl_seconds": op.ttl,
    }
    if reworded:  # the same intent: attendee spelling, time zone, title
        hour, minute = start.split(":")
        body |= {"attendees": [f"  {room.upper()} "], "title": "sync, again",
                 "start": f"2030-10-02T{int(hour) + 2:02d}:{minute}:00+02:00"}  # fmt: skip
    return body


def _create(c: Client, op: Create, label: str | None, lost: bool) -> None:
    who = AGENTS[op.agent]
    body = create_body(op, reworded=sum(spec == op for spec, _ in c.creates) % 2 == 1)
    c.creates.append((op, label))

    def run() -> Reply:
        req = HoldRequest(
            principal=who,
            workflow_id=body["workflow_id"],
            step=None,
            attendees=parse_attendees(body["attendees"]),
            interval=normalize_interval(start=body["start"], duration_minutes=30),
            title=body["title"],
            description=None,
            priority=who.priority,
            ttl_seconds=body["hold_ttl_seconds"],
        )
        # As the API does: a read answers a known call; only a new one writes.
        found = lookup_replay(c.uow(), req, c.policy, c.clock).reply
        return found or place_hold(c.uow(), req, c.policy, c.clock, c.ids)

    call = c.send("create", who, body, run, lost, intent=label)
    if call.ok:
        c.made[str(call.document()["id"])] = op


def _hold_action(c: Client, op: CommitOp | ReleaseOp, lost: bool) -> None:
    if not c.holds:
        return
    doc = list(c.holds.values())[op.pick % len(c.holds)]
    hold_id, owner = str(doc["id"]), next(a for a in AGENTS if a.agent_id == doc["agent_id"])
    if isinstance(op, CommitOp):
        token = int(doc["token"]) - op.stale
        action = HoldAction(owner, hold_id, token=token)
        c.send("commit", owner, {"token": token},
               lambda: commit_hold(c.uow(), action, c.policy, c.clock, c.ids),
               lost, hold_id, f"commit-{hold_id}")  # fmt: skip
        return
    who = ADMIN if op.by_admin else owner
    action = HoldAction(who, hold_id)
    c.send("release", who, {}, lambda: release_hold(c.uow(), action, c.policy, c.clock, c.ids),
           lost, hold_id, None if op.by_admin else f"release-{hold_id}")  # fmt: skip


def _acquire(c: Client, op: AcquireOp, lost: bool) -> None:
    who = AGENTS[op.n]
    body = {"workflow_id": "wf-exec", "tool": "send_email", "arguments": {"n": op.n},
            "lease_seconds": op.lease}  # fmt: skip
    req = ExecutionRequest(who, "wf-exec", None, "send_email", {"n": op.n}, op.lease)

    def run() -> Reply:  # as the API does: a read first, then the write
        found = lookup_execution(c.uow(), req, c.clock)
        return found or acquire(c.uow(), req, c.policy, c.clock, c.ids)

    c.send("acquire", who, body, run, lost, intent=f"exec-{op.n}")


def _complete(c: Client, op: CompleteOp, lost: bool) -> None:
    if not c.leases:
        return
    who, lease = c.leases[op.pick % len(c.leases)]
    key, token = str(lease["key"]), str(lease["lease_token"])
    body = {"lease_token": token, "outcome": op.outcome, "result": {"by": who.agent_id}}
    done = Completion(who, key, token, op.outcome, body["result"])
    c.send("complete", who, body, lambda: complete(c.uow(), done, c.policy, c.clock),
           lost, key, f"complete-{key}")  # fmt: skip


def label_of(op: Create) -> str:
    """The client's name for a create's intent: the workflow, the room and the slot."""
    return f"wf-{op.workflow}|{op.room}|{op.start}"


def run_step(c: Client, op: Operation, lost: bool) -> None:
    if isinstance(op, Create):
        _create(c, op, label_of(op) if op.labelled else None, lost)
    elif isinstance(op, Again) and c.creates:
        _create(c, *c.creates[op.pick % len(c.creates)], lost)
    elif isinstance(op, Outbid) and c.made:
        spec = list(c.made.values())[op.pick % len(c.made)]
        later = min(spec.start + 1, len(STARTS) - 1)
        claim = replace(spec, agent=2, workflow=7, start=later)
        _create(c, claim, label_of(claim), lost)
    elif isinstance(op, CommitOp | ReleaseOp):
        _hold_action(c, op, lost)
    elif isinstance(op, Wait):
        c.clock.advance(op.seconds)
    elif isinstance(op, Sweep):
        while expire_due(c.uow(), c.clock, c.ids):
            pass
    elif isinstance(op, AcquireOp):
        _acquire(c, op, lost)
    elif isinstance(op, CompleteOp):
        _complete(c, op, lost)


@contextmanager
def history(steps: Sequence[Step]) -> Iterator[Client]:
    with asyncio.Runner() as runner:
        client = Client(runner)
        for op, lost in steps:
            run_step(client, op, lost)
        yield client


# --- faults -------------------------------------------------------------------

Fault = Callable[[list[Call], Snapshot, datetime, st.DataObject], tuple[list[Call], Snapshot]]


def duplicate_effect(calls: list[Call], snap: Snapshot, now: datetime,
                     data: st.DataObject) -> tuple[list[Call], Snapshot]:  # fmt: skip
    """A second hold stored under a key that has one (released, so it blocks nobody)."""
    hold = data.draw(st.sampled_from(snap.holds))
    twin = replace(hold, id=f"{hold.id}_twin", status=HoldStatus.RELEASED, committed_at=None,
                   preempted_by=None)  # fmt: skip
    return calls, replace(snap, holds=(*snap.holds, twin))


def changed_replay(calls: list[Call], snap: Snapshot, now: datetime,
                   data: st.DataObject) -> tuple[list[Call], Snapshot]:  # fmt: skip
    """One byte of a replayed answer changed (one whose key has another answer)."""
    answered = Counter(c.key for c in calls if c.ok)
    replays = [i for i, c in enumerate(calls) if c.ok and c.op in ("create", "commit", "release")
               and c.header("Idempotent-Replayed") == "true" and answered[c.key] > 1]  # fmt: skip
    i = data.draw(st.sampled_from(replays))
    body = bytearray(calls[i].body)
    body[data.draw(st.integers(0, len(body) - 1))] ^= 1
    return [*calls[:i], replace(calls[i], body=bytes(body)), *calls[i + 1 :]], snap


def dropped_hold(calls: list[Call], snap: Snapshot, now: datetime,
                 data: st.DataObject) -> tuple[list[Call], Snapshot]:  # fmt: skip
    """A hold a create acknowledged, lost by the store."""
    named = sorted({str(c.document()["id"]) for c in calls if c.op == "create" and c.ok})
    gone = data.draw(st.sampled_from(named))
    return calls, replace(snap, holds=tuple(h for h in snap.holds if h.id != gone))


def overlapping_holds(calls: list[Call], snap: Snapshot, now: datetime,
                      data: st.DataObject) -> tuple[list[Call], Snapshot]:  # fmt: skip
    """One blocking hold moved onto another's slot and attendees."""
    blocking = [h for h in snap.holds if h.blocks_at(now)]
    first, second = data.draw(st.permutations(blocking))[:2]
    moved = replace(second, attendees=first.attendees, start=first.start, end=first.end)
    return calls, replace(snap, holds=tuple(moved if h is second else h for h in snap.holds))


def relabelled_intent(calls: list[Call], snap: Snapshot, now: datetime,
                      data: st.DataObject) -> tuple[list[Call], Snapshot]:  # fmt: skip
    """A create answered under another key, labelled as if it were the same intent."""
    creates = [i for i, c in enumerate(calls) if c.op == "create" and c.ok]
    first = calls[data.draw(st.sampled_from([i for i in creates if calls[i].intent]))]
    i = data.draw(st.sampled_from([i for i in creates if calls[i].key != first.key]))
    return [*calls[:i], replace(calls[i], intent=first.intent), *calls[i + 1 :]], snap


def commit_after_preemption(calls: list[Call], snap: Snapshot, now: datetime,
                            data: st.DataObject) -> tuple[list[Call], Snapshot]:  # fmt: skip
    """The audit log shows a preemption, nobody told of it, before a hold's commit."""
    commits = [e for e in snap.audit if e.action == "hold.commit"]
    commit = data.draw(st.sampled_from(commits))
    preempt = replace(commit, action="hold.preempt", key=None, outcome="preempted")
    log = list(snap.audit)
    log.insert(log.index(commit), preempt)
    return calls, replace(snap, audit=tuple(_rechained(log)))


def _rechained(entries: Sequence[AuditEntry]) -> Iterator[AuditEntry]:
    head = (0, GENESIS)
    for e in entries:
        made = next_entry(head, tenant=e.tenant, at=e.at, actor=e.actor, action=e.action,
                          key=e.key, hold_id=e.hold_id, outcome=e.outcome)  # fmt: skip
        head = (made.seq, made.hash)
        yield made


FAULTS: list[tuple[Fault, str]] = [
    (duplicate_effect, "one_effect_per_key"),
    (changed_replay, "replays_identical"),
    (dropped_hold, "acknowledged_writes_present"),
    (overlapping_holds, "no_overlap"),
    (relabelled_intent, "one_key_per_intent"),
    (commit_after_preemption, "commits_with_current_token"),
]


# --- the properties -----------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(STEPS)
def test_histories_the_engine_makes_break_no_rule(steps: list[Step]) -> None:
    with history(steps) as c:
        assert check(c.calls, c.snapshot(), c.clock.now()) == []


@pytest.mark.parametrize(("fault", "rule"), FAULTS, ids=[f.__name__ for f, _ in FAULTS])
@settings(max_examples=40, deadline=None)
@given(steps=STEPS, data=st.data())
def test_each_fault_is_reported_by_the_rule_it_breaks(
    fault: Fault, rule: str, steps: list[Step], data: st.DataObject
) -> None:
    with history([*steps, *CLOSING]) as c:
        calls, snap, now = c.calls, c.snapshot(), c.clock.now()
    assert check(calls, snap, now) == []
    calls, snap = fault(calls, snap, now, data)
    assert rule in {v.rule for v in check(calls, snap, now)}
