"""The crash test's plan: from one seed, every call the clients will make and where the server dies.

A plan numbers the calls in the order they go out (plan indices). Each call is
an agent's, and an agent's calls come in tasks: a create (sometimes sent twice)
with a rewording for its retries; a commit or a release (sometimes twice) of
one of the holds the agent has got by then; an execution: an acquire, then a
completion unless the lease is abandoned. The order is rounds in which every
agent sends one call, the agents shuffled per round, an agent's next call at
least ``SPACING`` places after its last: an agent waits for its own answer
before its next call, so the calls between keep the server busy meanwhile.

The kill points are plan indices: the server is SIGKILLed right after the call
at each point has gone out (or was skipped: a commit with no hold to commit),
or, at about half of them (``lose_answer``), the moment that call's answer
arrives, and the client drops the answer: a call that acted and lost its
answer, the case a retry's replay must cover. Nothing here reads a clock or an
answer: one seed, one plan. What the answers are, and so which holds a commit
finds, is up to the run (tests/e2e/crash_workload.py).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["KILLS", "MAX_LEASE", "SEED", "Plan", "Task", "acquire_label", "execution", "make_plan"]

SEED = 20310506
KILLS = 22
GAPS = (8, 32)  # planned calls from one kill point to the next, drawn uniformly
SPACING = 6  # planned calls from one of an agent's calls to its next, at least
TAIL = 24  # planned calls after the last kill point: the last restart is used too
ROOMS = tuple(f"room-{i}@example.com" for i in range(3))
MAX_LEASE = 2
LOSE_ANSWER = 0.5  # the share of kill points that wait for the call's answer, then lose it

Kind = Literal["create", "commit", "release", "execution"]


@dataclass(frozen=True)
class Task:
    """Calls of one agent that belong together, sent in order (``calls``: plan indices)."""

    kind: Kind
    calls: tuple[int, ...]
    label: str = ""  # create, execution: the intent as the client names it (no tenant)
    bodies: tuple[dict[str, Any], ...] = ()  # create, execution: first body, then rewordings
    pick: float = 0.0  # commit, release: which of the agent's holds, as a fraction of them
    outcome: str | None = None  # execution: the completion's outcome; None: abandoned


@dataclass(frozen=True)
class Plan:
    seed: int
    tasks: tuple[tuple[Task, ...], ...]  # per agent, in the order the agents were given
    kill_at: tuple[int, ...]  # ascending plan indices
    length: int  # planned calls in all
    lose_answer: tuple[bool, ...] = ()  # per kill point: kill as its call's answer arrives


@dataclass(frozen=True)
class _Draft:
    kind: Kind
    count: int
    label: str = ""
    bodies: tuple[dict[str, Any], ...] = ()
    pick: float = 0.0
    outcome: str | None = None


def make_plan(seed: int, agents: Sequence[str]) -> Plan:
    """The plan of ``seed`` for the agents named (their names go into workflow ids)."""
    rng = random.Random(seed)
    kill_at = tuple(itertools.accumulate(rng.randint(*GAPS) for _ in range(KILLS)))
    per_agent = -(-(kill_at[-1] + TAIL) // len(agents))
    drafts = [_drafts(random.Random(rng.getrandbits(64)), name, per_agent) for name in agents]
    order = _order(random.Random(rng.getrandbits(64)), [sum(d.count for d in ds) for ds in drafts])
    tasks = tuple(_placed(ds, [i for i, a in enumerate(order) if a == agent])
                  for agent, ds in enumerate(drafts))  # fmt: skip
    losing = random.Random(rng.getrandbits(64))  # drawn last: the rest is as before per seed
    lose_answer = tuple(losing.random() < LOSE_ANSWER for _ in kill_at)
    return Plan(seed, tasks, kill_at, len(order), lose_answer)


def _placed(drafts: Sequence[_Draft], indices: Sequence[int]) -> tuple[Task, ...]:
    """The drafts as tasks, their calls at the agent's plan ``indices`` in turn."""
    slots = iter(indices)
    return tuple(
        Task(d.kind, tuple(itertools.islice(slots, d.count)), d.label, d.bodies, d.pick, d.outcome)
        for d in drafts
    )


def _drafts(rng: random.Random, name: str, wanted: int) -> list[_Draft]:
    """An agent's tasks, at least ``wanted`` calls: 40% creates, 15% commits, 10% releases,
    35% executions (a create whenever no hold may be left to act on)."""
    drafts: list[_Draft] = []
    live = 0  # creates minus releases planned so far: whether a commit may find a hold
    while sum(d.count for d in drafts) < wanted:
        roll, again = rng.random(), rng.choice([1, 1, 2])  # sometimes a duplicate right away
        if roll < 0.4 or not live:
            label, bodies = _hold_variants(rng, name)
            drafts.append(_Draft("create", again, label, bodies))
            live += 1
        elif roll < 0.55:
            drafts.append(_Draft("commit", again, pick=rng.random()))
        elif roll < 0.65:
            drafts.append(_Draft("release", again, pick=rng.random()))
            live -= 1
        else:
            drafts.append(_execution_draft(rng))
    return drafts


def _hold_variants(rng: random.Random, name: str) -> tuple[str, tuple[dict[str, Any], ...]]:
    """A create and the same intent reworded (title, offset, attendee spelling)."""
    room = rng.choice(ROOMS)
    minutes = rng.choice([0, 15, 30, 45, 60])
    hour, minute = 9 + minutes // 60, minutes % 60
    shared = rng.random() < 0.15  # another agent of the tenant in the same workflow
    workflow = f"wf-shared-{rng.randrange(2)}" if shared else f"wf-{name}-{rng.randrange(3)}"
    call: dict[str, Any] = {
        "workflow_id": workflow,
        "step": rng.choice([1, 2]),
        "attendees": [room],
        "start": f"2031-05-06T{hour:02d}:{minute:02d}:00Z",
        "duration_minutes": 30,
        "title": f"sync {rng.randrange(1000)}",
    }
    if rng.random() < 0.2:
        call["hold_ttl_seconds"] = 10
    reworded = {
        **call,
        "attendees": [f"  {room.upper()} "],
        "start": f"2031-05-06T{hour + 2:02d}:{minute:02d}:00+02:00",
        "title": f"{call['title']} (retry)",
        "agent_thought": "the first call timed out",
    }
    label = f"create {workflow} step {call['step']}: {room} {call['start']} 30m"
    return label, ((call, reworded) if rng.random() < 0.5 else (reworded, call))


def execution(n: int, lease: int) -> dict[str, Any]:
    """An acquire's body: the same ``n`` is the same intent (one key per tenant)."""
    return {"workflow_id": f"wf-exec-{n}", "tool": "send_email", "arguments": {"n": n},
            "lease_seconds": lease}  # fmt: skip


def acquire_label(workflow_id: str, tool: str) -> str:
    """An acquire's intent as the client names it (the arguments follow from the workflow)."""
    return f"acquire {workflow_id} {tool}"


def _execution_draft(rng: random.Random) -> _Draft:
    n = rng.randrange(30)
    body = execution(n, rng.randint(1, MAX_LEASE))
    waiting = {**body, "wait_ms": 2500}  # a retry waits out the lease its lost call may hold
    abandoned = rng.random() < 0.15  # its lease runs out for another agent to take over
    outcome = rng.choice(["succeeded", "succeeded", "failed_terminal", "failed_retryable"])
    label = acquire_label(body["workflow_id"], body["tool"])
    return _Draft("execution", 1 if abandoned else 2, label, (body, waiting),
                  outcome=None if abandoned else outcome)  # fmt: skip


def _order(rng: random.Random, counts: Sequence[int]) -> list[int]:
    """The agent of each plan index: rounds in which every agent with calls left sends
    one, shuffled, with an agent's calls ``SPACING`` places apart where the round allows:
    an agent waiting for its last answer holds up the calls after it, so a call right
    after the same agent's would empty the pipeline."""
    left, order = list(counts), list[int]()
    while any(left):
        round_ = [agent for agent, n in enumerate(left) if n]
        spacing = min(SPACING, len(round_))
        tail = order[-spacing:]
        ago = {agent: len(tail) - i for i, agent in enumerate(tail)}  # the latest call counts
        for _ in range(1000):  # a shuffle that keeps the spacing: one in 30 or so
            rng.shuffle(round_)
            if all(ago.get(a, spacing) + j >= spacing for j, a in enumerate(round_)):
                break
        for agent in round_:
            left[agent] -= 1
        order += round_
    return order
