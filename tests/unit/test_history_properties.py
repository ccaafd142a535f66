"""The history checker against histories the engine really makes, and faults put into them.

A history is made by running the engine's use cases on the in-memory fakes
over a random sequence of operations in two tenants: creates (some reworded,
some sent again, some at another step of the same workflow, some with the
client's own ``Idempotency-Key``, some by a higher priority that preempts),
commits with the token the client last saw or a stale one, releases by the
owner or an admin, waits past expiries and leases, sweeps (and commits and
releases after them), and executions acquired and completed. Each call is
recorded as HTTP would answer it: a ``Reply`` through the API's own
``reply_response``, an error through its problem middleware. Some calls are
lost: some after the engine acted (the answer never came back), some before it
(the request never arrived). The client sees nothing either way and carries on.
The snapshot is the fake store's final state.

Creates are labelled with their workflow, slot, step and choice of key, as the
crash test labels them, so one intent at two steps of a workflow carries two
labels and meets as a step-drift replay (DESIGN 3): the intent rule must let
that pass. A few scenarios that random steps seldom make are operations of
their own (a preemption, a drift around a hold's end, a commit or release
after a swept expiry), and each is also an ``@example``.

Such a history must pass :func:`check`. Then one fault is put in, and the
check it breaks must report it. A few fixed operations close every history,
so each fault has a place to go.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request
from hypothesis import example, given, settings
from hypothesis import strategies as st

from slotward.api.http.problems import problem_middleware
from slotward.api.http.responses import reply_response
from slotward.engine.clock import FixedClock
from slotward.engine.errors import SlotwardError
from slotward.engine.fakes import InMemoryUnitOfWork, SequentialIds, State
from slotward.engine.model import AuditEntry, HoldStatus, Principal, Reply
from slotward.engine.rules.attendees import parse_attendees
from slotward.engine.rules.audit import GENESIS, next_entry
from slotward.engine.rules.policy import Policy
from slotward.engine.rules.timenorm import normalize_interval
from slotward.engine.usecases.executions import (
    Completion,
    ExecutionRequest,
    Outcome,
    acquire,
    complete,
    lookup_execution,
)
from slotward.engine.usecases.lifecycle import HoldAction, commit_hold, expire_due, release_hold
from slotward.engine.usecases.placing import HoldRequest, lookup_replay, place_hold
from slotward.testing.history import Call, Op, Snapshot, check

T0 = datetime(2030, 10, 1, 9, 0, tzinfo=UTC)
TENANTS = ("acme", "globex")
AGENTS = {t: tuple(Principal(t, f"agent-{p}", "agent", p) for p in (10, 50, 90)) for t in TENANTS}
ADMINS = {t: Principal(t, "ops", "admin", 0) for t in TENANTS}
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
    step: int | None = None
    tenant: int = 0
    own_key: bool = False  # sends an Idempotency-Key of its own


@dataclass(frozen=True)
class Again:
    """An earlier create sent again (a retry, a duplicate), reworded every other time."""

    pick: int


@dataclass(frozen=True)
class Drift:
    """An earlier create sent again at another step of its workflow."""

    pick: int
    step: int | None


@dataclass(frozen=True)
class Outbid:
    """The highest priority claims a slot overlapping a hold the clients were told of."""

    pick: int


@dataclass(frozen=True)
class Contest:
    """The lowest priority books a slot, the highest claims an overlapping one (its
    answer lost now and then), and the loser tries to commit."""

    tenant: int
    room: int
    start: int
    winner_lost: bool


Gone = Literal["release", "expire", "preempt"]


@dataclass(frozen=True)
class Rebook:
    """``create`` at step 1, then at step 2 (answered with step 1's hold), that hold
    then gone, and step 2 sent again: it books anew under its own key."""

    create: Create
    gone: Gone


@dataclass(frozen=True)
class CommitOp:
    pick: int  # of the holds the client was told of
    stale: bool  # one less than the token it last saw


@dataclass(frozen=True)
class ReleaseOp:
    pick: int
    by_admin: bool


@dataclass(frozen=True)
class Late:
    """A hold the client was told of left to expire and swept, then committed or released."""

    pick: int
    commit: bool


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


Operation = (
    Create | Again | Drift | Outbid | Contest | Rebook | CommitOp | ReleaseOp | Late | Wait
    | Sweep | AcquireOp | CompleteOp
)  # fmt: skip

# What became of a call: answered; "lost" after the engine acted; "unsent",
# lost before it arrived (the engine never ran it).
Fate = Literal["answered", "lost", "unsent"]

OUTCOMES: tuple[Outcome, ...] = ("succeeded", "failed_terminal", "failed_retryable")
_picks = st.integers(0, 50)
_steps = st.sampled_from([None, 1, 2])
_creates = st.builds(Create, st.integers(0, 2), st.integers(0, 3), st.integers(0, 1),
                     st.integers(0, 2), st.sampled_from([60, 300]), st.booleans(), _steps,
                     st.integers(0, 1), st.integers(0, 5).map(lambda n: n == 0))  # fmt: skip
# The two lower priorities, so that a preemption can win.
_preemptable = st.builds(Create, st.integers(0, 1), st.integers(0, 3), st.integers(0, 1),
                         st.integers(0, 2), st.sampled_from([60, 300]), st.just(True),
                         tenant=st.integers(0, 1))  # fmt: skip
# Creates weigh most: they make the conflicts, preemptions and replays.
OPERATIONS: st.SearchStrategy[Operation] = st.one_of(
    _creates, _creates, _creates,
    st.builds(Again, _picks), st.builds(Again, _picks), st.builds(Drift, _picks, _steps),
    st.builds(Outbid, _picks),
    st.builds(Contest, st.integers(0, 1), st.integers(0, 1), st.integers(0, 2), st.booleans()),
    st.builds(Rebook, _preemptable, st.sampled_from(["release", "expire", "preempt"])),
    st.builds(CommitOp, _picks, st.booleans()), st.builds(CommitOp, _picks, st.booleans()),
    st.builds(ReleaseOp, _picks, st.booleans()),
    st.builds(Late, _picks, st.booleans()),
    st.builds(Wait, st.sampled_from([5, 40, 200, 400])),
    st.just(Sweep()),
    st.builds(AcquireOp, st.integers(0, 2), st.sampled_from([10, 30])),
    st.builds(CompleteOp, _picks, st.sampled_from(OUTCOMES)),
)  # fmt: skip
# A step: an operation, and the fate of its (last) call: 1 in 12 lost, 1 in 12 unsent.
Step = tuple[Operation, Fate]
_FATES: tuple[Fate, ...] = ("lost", "unsent", *(("answered",) * 10))
STEPS = st.lists(st.tuples(OPERATIONS, st.sampled_from(_FATES)), min_size=4, max_size=30)

# They close every history, so that each fault has a place to go: a hold that
# expires and is swept, two fresh holds in workflows and rooms nothing else
# uses, a replay, a commit.
CLOSING: tuple[Step, ...] = (
    (Create(0, 10, 10, 0, 60, True), "answered"),
    (Wait(120), "answered"),
    (Sweep(), "answered"),
    (Create(0, 8, 8, 0, 300, True), "answered"),
    (Again(-1), "answered"),
    (Create(1, 9, 9, 1, 300, True), "answered"),
    (CommitOp(-1, False), "answered"),
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
    tenants: dict[str, str] = field(default_factory=dict)  # of the holds told of
    made: dict[str, Create] = field(default_factory=dict)  # which create a hold answered
    leases: list[tuple[Principal, dict[str, Any]]] = field(default_factory=list)

    def uow(self) -> InMemoryUnitOfWork:
        return InMemoryUnitOfWork(self.state)

    def send(self, op: Op, who: Principal, request: dict[str, Any], run: Callable[[], Reply],
             fate: Fate, target: str | None = None, intent: str | None = None,
             key_sent: str | None = None) -> Call:  # fmt: skip
        at = float(len(self.calls))  # the client's clock: one call after the other
        status: int | None = None
        body: bytes = b""
        headers: dict[str, str] = {}
        if fate != "unsent":
            try:
                response: web.StreamResponse = reply_response(run())
            except SlotwardError as error:
                response = self.runner.run(_problem(error))
            assert isinstance(response, web.Response)
            assert isinstance(response.body, bytes)
            status, body, headers = response.status, response.body, dict(response.headers)
        if fate != "answered":  # the client saw nothing
            status, body, headers = None, b"", {}
        call = Call(op, who.tenant, who.agent_id, request, status, body, headers, target,
                    key_sent, invoked_at=at, completed_at=at + 0.5, intent=intent)  # fmt: skip
        self.calls.append(call)
        if call.ok and op in ("create", "commit", "release"):
            self.holds[str(call.document()["id"])] = call.document()
            self.tenants[str(call.document()["id"])] = who.tenant
        if call.status == 201 and op == "acquire":
            self.leases.append((who, call.document()))
        return call

    def sweep(self) -> None:
        while expire_due(self.uow(), self.clock, self.ids):
            pass

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
    if op.step is not None:
        body["step"] = op.step
    if reworded:  # the same intent: attendee spelling, time zone, title
        hour, minute = start.split(":")
        body |= {"attendees": [f"  {room.upper()} "], "title": "sync, again",
                 "start": f"2030-10-02T{int(hour) + 2:02d}:{minute}:00+02:00"}  # fmt: skip
    return body


def label_of(op: Create) -> str:
    """The client's name for a create: the workflow, the slot, the step, whose key."""
    key = "own key" if op.own_key else "derived key"
    return f"wf-{op.workflow}|{op.room}|{op.start}|step {op.step}|{key}"


def own_key(op: Create) -> str:
    """The client's own Idempotency-Key for a create: one per call it names."""
    return f"ck-{op.workflow}-{op.room}-{op.start}-{op.step}"


def _create(c: Client, op: Create, label: str | None, fate: Fate) -> Call:
    who = AGENTS[TENANTS[op.tenant]][op.agent]
    body = create_body(op, reworded=sum(spec == op for spec, _ in c.creates) % 2 == 1)
    sent = own_key(op) if op.own_key else None
    c.creates.append((op, label))

    def run() -> Reply:
        req = HoldRequest(
            principal=who,
            workflow_id=body["workflow_id"],
            step=op.step,
            attendees=parse_attendees(body["attendees"]),
            interval=normalize_interval(start=body["start"], duration_minutes=30),
            title=body["title"],
            description=None,
            priority=who.priority,
            ttl_seconds=body["hold_ttl_seconds"],
            client_key=sent,
        )
        # As the API does: a read answers a known call; only a new one writes.
        found = lookup_replay(c.uow(), req, c.policy, c.clock).reply
        return found or place_hold(c.uow(), req, c.policy, c.clock, c.ids)

    call = c.send("create", who, body, run, fate, intent=label, key_sent=sent)
    if call.ok:
        c.made[str(call.document()["id"])] = op
    return call


def _labelled(c: Client, op: Create, fate: Fate) -> Call:
    return _create(c, op, label_of(op), fate)


def _owner(c: Client, hold_id: str) -> Principal:
    doc, tenant = c.holds[hold_id], c.tenants[hold_id]
    return next(a for a in AGENTS[tenant] if a.agent_id == doc["agent_id"])


def _commit(c: Client, hold_id: str, stale: bool, fate: Fate) -> None:
    owner, token = _owner(c, hold_id), int(c.holds[hold_id]["token"]) - stale
    action = HoldAction(owner, hold_id, token=token)
    c.send("commit", owner, {"token": token},
           lambda: commit_hold(c.uow(), action, c.policy, c.clock, c.ids),
           fate, hold_id, f"commit-{hold_id}")  # fmt: skip


def _release(c: Client, hold_id: str, by_admin: bool, fate: Fate) -> None:
    owner = _owner(c, hold_id)
    who = ADMINS[owner.tenant] if by_admin else owner
    action = HoldAction(who, hold_id)
    c.send("release", who, {}, lambda: release_hold(c.uow(), action, c.policy, c.clock, c.ids),
           fate, hold_id, None if by_admin else f"release-{hold_id}")  # fmt: skip


def _told(c: Client, pick: int) -> str | None:
    """One of the holds the client was told of."""
    return list(c.holds)[pick % len(c.holds)] if c.holds else None


def _past_expiry(c: Client, hold_id: str) -> None:
    """The clock moved past the hold's expiry (as last answered), then a sweep."""
    expires = datetime.fromisoformat(str(c.holds[hold_id]["expires_at"]))
    if c.clock.now() <= expires:
        c.clock.set(expires + timedelta(seconds=1))
    c.sweep()


def _acquire(c: Client, op: AcquireOp, fate: Fate) -> None:
    who = AGENTS[TENANTS[0]][op.n]
    body = {"workflow_id": "wf-exec", "tool": "send_email", "arguments": {"n": op.n},
            "lease_seconds": op.lease}  # fmt: skip
    req = ExecutionRequest(who, "wf-exec", None, "send_email", {"n": op.n}, op.lease)

    def run() -> Reply:  # as the API does: a read first, then the write
        found = lookup_execution(c.uow(), req, c.clock)
        return found or acquire(c.uow(), req, c.policy, c.clock, c.ids)

    c.send("acquire", who, body, run, fate, intent=f"exec-{op.n}")


def _complete(c: Client, op: CompleteOp, fate: Fate) -> None:
    if not c.leases:
        return
    who, lease = c.leases[op.pick % len(c.leases)]
    key, token = str(lease["key"]), str(lease["lease_token"])
    body = {"lease_token": token, "outcome": op.outcome, "result": {"by": who.agent_id}}
    done = Completion(who, key, token, op.outcome, body["result"])
    c.send("complete", who, body, lambda: complete(c.uow(), done, c.policy, c.clock),
           fate, key, f"complete-{key}")  # fmt: skip


def _later(op: Create) -> Create:
    """The highest priority's claim on the next, overlapping slot, in its own workflow."""
    return replace(op, agent=2, workflow=7, start=min(op.start + 1, len(STARTS) - 1), step=None,
                   own_key=False, labelled=True)  # fmt: skip


def _contest(c: Client, op: Contest, fate: Fate) -> None:
    low = Create(0, 5, op.room, op.start, 300, True, tenant=op.tenant)
    loser = _labelled(c, low, "answered")
    _labelled(c, _later(low), "lost" if op.winner_lost else "answered")
    if loser.ok:
        _commit(c, str(loser.document()["id"]), False, fate)


def _rebook(c: Client, op: Rebook, fate: Fate) -> None:
    first, drifted = replace(op.create, step=1), replace(op.create, step=2)
    booked = _labelled(c, first, "answered")
    _labelled(c, drifted, "answered")
    if booked.ok:
        hold_id = str(booked.document()["id"])
        if op.gone == "release":
            _release(c, hold_id, False, "answered")
        elif op.gone == "expire":
            _past_expiry(c, hold_id)
        else:
            _labelled(c, _later(first), "answered")
    _labelled(c, drifted, fate)


def _late(c: Client, op: Late, fate: Fate) -> None:
    hold_id = _told(c, op.pick)
    if hold_id is not None:
        _past_expiry(c, hold_id)
        (_commit if op.commit else _release)(c, hold_id, False, fate)


def run_step(c: Client, op: Operation, fate: Fate) -> None:
    if isinstance(op, Create):
        _create(c, op, label_of(op) if op.labelled else None, fate)
    elif isinstance(op, Again) and c.creates:
        _create(c, *c.creates[op.pick % len(c.creates)], fate)
    elif isinstance(op, Drift) and c.creates:
        spec, label = c.creates[op.pick % len(c.creates)]
        _create(c, replace(spec, step=op.step), label and label_of(replace(spec, step=op.step)),
                fate)  # fmt: skip
    elif isinstance(op, Outbid) and c.made:
        _labelled(c, _later(list(c.made.values())[op.pick % len(c.made)]), fate)
    elif isinstance(op, Contest):
        _contest(c, op, fate)
    elif isinstance(op, Rebook):
        _rebook(c, op, fate)
    elif isinstance(op, CommitOp | ReleaseOp):
        hold_id = _told(c, op.pick)
        if hold_id is not None and isinstance(op, CommitOp):
            _commit(c, hold_id, op.stale, fate)
        elif hold_id is not None and isinstance(op, ReleaseOp):
            _release(c, hold_id, op.by_admin, fate)
    elif isinstance(op, Late):
        _late(c, op, fate)
    elif isinstance(op, Wait):
        c.clock.advance(op.seconds)
    elif isinstance(op, Sweep):
        c.sweep()
    elif isinstance(op, AcquireOp):
        _acquire(c, op, fate)
    elif isinstance(op, CompleteOp):
        _complete(c, op, fate)


@contextmanager
def history(steps: Sequence[Step]) -> Iterator[Client]:
    with asyncio.Runner() as runner:
        client = Client(runner)
        for op, fate in steps:
            run_step(client, op, fate)
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
    """One blocking hold moved onto another's slot and attendees (of one tenant)."""
    per_tenant = Counter(h.tenant for h in snap.holds if h.blocks_at(now))
    tenant = data.draw(st.sampled_from(sorted(t for t, n in per_tenant.items() if n > 1)))
    blocking = [h for h in snap.holds if h.blocks_at(now) and h.tenant == tenant]
    first, second = data.draw(st.permutations(blocking))[:2]
    moved = replace(second, attendees=first.attendees, start=first.start, end=first.end)
    return calls, replace(snap, holds=tuple(moved if h is second else h for h in snap.holds))


def overlap_since_released(calls: list[Call], snap: Snapshot, now: datetime,
                           data: st.DataObject) -> tuple[list[Call], Snapshot]:  # fmt: skip
    """A second hold placed on a hold's slot and attendees just after it, then released:
    a double booking the store no longer shows."""
    created = [e for e in snap.audit if e.action == "hold.create" and e.hold_id]
    entry = data.draw(st.sampled_from(created))
    hold = next(h for h in snap.holds if (h.tenant, h.id) == (entry.tenant, entry.hold_id))
    twin = replace(hold, id=f"{hold.id}_double", key=f"{hold.key}_double",
                   status=HoldStatus.RELEASED, token=2, committed_at=None,
                   preempted_by=None)  # fmt: skip
    made = replace(entry, hold_id=twin.id, key=twin.key)
    released = replace(entry, action="hold.release", hold_id=twin.id, key=None)
    log = list(snap.audit)
    at = log.index(entry) + 1
    log[at:at] = [made, released]
    return calls, replace(snap, holds=(*snap.holds, twin), audit=tuple(_rechained(log)))


def relabelled_intent(calls: list[Call], snap: Snapshot, now: datetime,
                      data: st.DataObject) -> tuple[list[Call], Snapshot]:  # fmt: skip
    """A create of another intent labelled as if it were the same call as a labelled one."""
    intent_of = {(h.tenant, h.id): h.intent_fp for h in snap.holds}
    creates = [i for i, c in enumerate(calls) if c.op == "create" and c.ok]

    def fp(i: int) -> str:
        return intent_of[calls[i].tenant, str(calls[i].document()["id"])]

    pairs = [(first, i) for first in creates if calls[first].intent for i in creates
             if calls[i].tenant == calls[first].tenant and fp(i) != fp(first)]  # fmt: skip
    first, i = data.draw(st.sampled_from(pairs))
    return [*calls[:i], replace(calls[i], intent=calls[first].intent), *calls[i + 1 :]], snap


def commit_after_preemption(calls: list[Call], snap: Snapshot, now: datetime,
                            data: st.DataObject) -> tuple[list[Call], Snapshot]:  # fmt: skip
    """The audit log shows a preemption, nobody told of it, before a hold's commit."""
    commits = [e for e in snap.audit if e.action == "hold.commit"]
    commit = data.draw(st.sampled_from(commits))
    preempt = replace(commit, action="hold.preempt", key=None, outcome="preempted")
    log = list(snap.audit)
    log.insert(log.index(commit), preempt)
    return calls, replace(snap, audit=tuple(_rechained(log)))


def unaudited_move(calls: list[Call], snap: Snapshot, now: datetime,
                   data: st.DataObject) -> tuple[list[Call], Snapshot]:  # fmt: skip
    """The audit entry of a commit or release a 2xx acknowledged, lost."""
    logs = {"committed": "hold.commit", "released": "hold.release"}
    moved = {(c.tenant, c.target, logs.get(str(c.document().get("status")))) for c in calls
             if c.ok and c.op in ("commit", "release")}  # fmt: skip
    entries = [e for e in snap.audit if (e.tenant, e.hold_id, e.action) in moved]
    gone = data.draw(st.sampled_from(entries))
    return calls, replace(snap, audit=tuple(_rechained([e for e in snap.audit if e is not gone])))


def moved_token(calls: list[Call], snap: Snapshot, now: datetime,
                data: st.DataObject) -> tuple[list[Call], Snapshot]:  # fmt: skip
    """A stored hold's token moved on by one, with no audit entry for it."""
    hold = data.draw(st.sampled_from(snap.holds))
    moved = replace(hold, token=hold.token + 1)
    return calls, replace(snap, holds=tuple(moved if h is hold else h for h in snap.holds))


def outdated_token(calls: list[Call], snap: Snapshot, now: datetime,
                   data: st.DataObject) -> tuple[list[Call], Snapshot]:  # fmt: skip
    """A fresh commit that was sent one less than the token the client had been shown."""
    commits = [i for i, c in enumerate(calls) if c.op == "commit" and c.fresh]
    i = data.draw(st.sampled_from(commits))
    sent = {"token": int(calls[i].request["token"]) - 1}
    return [*calls[:i], replace(calls[i], request=sent), *calls[i + 1 :]], snap


def unlogged_hold(calls: list[Call], snap: Snapshot, now: datetime,
                  data: st.DataObject) -> tuple[list[Call], Snapshot]:  # fmt: skip
    """A stored hold's ``hold.create`` entry lost."""
    created = [e for e in snap.audit if e.action == "hold.create" and e.hold_id]
    gone = data.draw(st.sampled_from(created))
    return calls, replace(snap, audit=tuple(_rechained([e for e in snap.audit if e is not gone])))


def unstored_hold(calls: list[Call], snap: Snapshot, now: datetime,
                  data: st.DataObject) -> tuple[list[Call], Snapshot]:  # fmt: skip
    """A hold lost by the store, whether or not anybody was told of it."""
    gone = data.draw(st.sampled_from(snap.holds))
    return calls, replace(snap, holds=tuple(h for h in snap.holds if h is not gone))


def early_expiry(calls: list[Call], snap: Snapshot, now: datetime,
                 data: st.DataObject) -> tuple[list[Call], Snapshot]:  # fmt: skip
    """A ``hold.expire`` entry dated a second before the hold's ``expires_at``."""
    due = {(h.tenant, h.id): h.expires_at for h in snap.holds}
    entry = data.draw(st.sampled_from([e for e in snap.audit if e.action == "hold.expire"]))
    early = replace(entry, at=due[entry.tenant, str(entry.hold_id)] - timedelta(seconds=1))
    log = [early if e is entry else e for e in snap.audit]
    return calls, replace(snap, audit=tuple(_rechained(log)))


def _rechained(entries: Sequence[AuditEntry]) -> Iterator[AuditEntry]:
    heads: dict[str, tuple[int, str]] = {}  # one chain per tenant
    for e in entries:
        made = next_entry(heads.get(e.tenant, (0, GENESIS)), tenant=e.tenant, at=e.at,
                          actor=e.actor, action=e.action, key=e.key, hold_id=e.hold_id,
                          outcome=e.outcome)  # fmt: skip
        heads[e.tenant] = (made.seq, made.hash)
        yield made


# Each fault, the rule that must report it, and words of the check within it
# that does, so that each check is shown to be needed.
FAULTS: list[tuple[Fault, str, str]] = [
    (duplicate_effect, "one_effect_per_key", "holds stored under key"),
    (changed_replay, "replays_identical", "answered"),
    (dropped_hold, "acknowledged_writes_present", "is missing"),
    (overlapping_holds, "no_overlap", "overlap"),
    (overlap_since_released, "no_overlap", "audit seq"),
    (relabelled_intent, "one_key_per_intent", "intent"),
    (commit_after_preemption, "commits_with_current_token", "preempted since seq"),
    (unaudited_move, "acknowledged_writes_present", "is not audited"),
    (moved_token, "commits_with_current_token", "its audit log leaves it"),
    (outdated_token, "commits_with_current_token", "after an answer showed token"),
    (unlogged_hold, "commits_with_current_token", "the audit log never created it"),
    (unstored_hold, "commits_with_current_token", "which is not stored"),
    (early_expiry, "commits_with_current_token", "before its expires_at"),
]


# --- the properties -----------------------------------------------------------

_DRIFTING = Create(0, 1, 0, 0, 60, True)


@settings(max_examples=300, deadline=None)
@given(STEPS)
@example([(Rebook(_DRIFTING, "release"), "answered")])
@example([(Rebook(_DRIFTING, "expire"), "answered")])
@example([(Rebook(_DRIFTING, "preempt"), "answered")])
@example([(Rebook(replace(_DRIFTING, tenant=1, own_key=True), "release"), "lost")])
@example([(Contest(0, 0, 0, True), "answered"), (Contest(1, 0, 0, False), "lost")])
@example([(_DRIFTING, "answered"), (Late(0, True), "answered"), (Late(0, False), "answered")])
@example([(_DRIFTING, "answered"), (Late(0, False), "lost"), (Late(0, True), "answered")])
@example([(_DRIFTING, "unsent"), (Again(0), "lost"), (Drift(0, 2), "answered")])
def test_histories_the_engine_makes_break_no_rule(steps: list[Step]) -> None:
    with history(steps) as c:
        assert check(c.calls, c.snapshot(), c.clock.now()) == []


@pytest.mark.parametrize(("fault", "rule", "says"), FAULTS, ids=[f.__name__ for f, *_ in FAULTS])
@settings(max_examples=40, deadline=None)
@given(steps=STEPS, data=st.data())
def test_each_fault_is_reported_by_the_rule_it_breaks(
    fault: Fault, rule: str, says: str, steps: list[Step], data: st.DataObject
) -> None:
    with history([*steps, *CLOSING]) as c:
        calls, snap, now = c.calls, c.snapshot(), c.clock.now()
    assert check(calls, snap, now) == []
    calls, snap = fault(calls, snap, now, data)
    assert any(v.rule == rule and says in v.detail for v in check(calls, snap, now))
