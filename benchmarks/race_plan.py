"""Who races for what in ``slotward bench race``: agents, their claims, their retries.

Slot ``s`` is attendee ``slot-<s>@race.example`` around one instant. Agent
``a`` claims slot ``a mod S`` with its own API key and priority (10-90; every
seventh agent lowers its hold's priority in the body by 5, as a body may, never
above the key's). The claims of one slot all overlap, but not all alike: a
start on the hour or a quarter past, 30 or 45 minutes. Claims with the very
same interval are the same intent in other workflows, which never preempt each
other (DESIGN 5); the others preempt when strictly higher. So each slot ends
with exactly one winner.

Besides its claim an agent may send (by its index):

- a duplicate at the same moment as the original (every 4th): a retry racing
  the first call;
- a rephrased retry afterwards (every 3rd): the same intent reworded, as an LLM
  re-emitting a tool call would. The email's case and spaces, the start in
  another UTC offset or as a local time with a ``timezone``, ``end`` or an ISO
  ``duration`` instead of ``duration_minutes``, a ``Name <email>`` attendee, a
  new title and a thought field (``reasoning``, ...), none of which is
  identity (docs/idempotency.md, engine/rules/fingerprint.py);
- a commit of the hold it was answered (every 5th), if it got one.

Each create carries the intent label ``agent-<a>`` (duplicate and retry too),
each commit ``commit-<a>``: the history checker holds the answers to them.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any

from slotward.benchmarks.plans import Call, instant

__all__ = ["TENANT", "Agent", "agents", "race_tasks", "rephrased", "slot_email"]

TENANT = "race"
_PRIORITIES = (10, 30, 50, 70, 90)
_THOUGHTS = ("reasoning", "agent_thought", "thought", "rationale")


@dataclass(frozen=True)
class Agent:
    index: int
    priority: int  # its key's
    slot: int
    offset_minutes: int  # from the slot's instant: 0 or 15
    minutes: int  # 30 or 45

    @property
    def lowers(self) -> bool:
        """Whether its body asks for a priority below its key's."""
        return self.index % 7 == 0


def agents(count: int, slots: int, seed: int) -> list[Agent]:
    rng = random.Random(seed)
    return [
        Agent(a, rng.choice(_PRIORITIES), a % slots, rng.choice((0, 15)), rng.choice((30, 45)))
        for a in range(count)
    ]


def slot_email(slot: int) -> str:
    return f"slot-{slot}@race.example"


def original(agent: Agent, at: datetime) -> dict[str, Any]:
    body: dict[str, Any] = {
        "workflow_id": f"wf-{agent.index}",
        "step": 1,
        "attendees": [slot_email(agent.slot)],
        "start": instant(at + timedelta(minutes=agent.offset_minutes)),
        "duration_minutes": agent.minutes,
        "title": f"race {agent.index}",
    }
    if agent.lowers:
        body["priority"] = agent.priority - 5
    return body


def rephrased(agent: Agent, at: datetime) -> dict[str, Any]:
    """The original call reworded: same workflow, step and intent, other words."""
    start = at + timedelta(minutes=agent.offset_minutes)
    end = start + timedelta(minutes=agent.minutes)
    email = slot_email(agent.slot)
    body: dict[str, Any] = {"workflow_id": f"wf-{agent.index}", "step": 1,
                            "title": f"Race #{agent.index} (retry)"}  # fmt: skip
    variant = agent.index % 4
    if variant == 0:
        body |= {"attendees": [f"  {email.upper()} "], "start": _offset(start, 2),
                 "duration_minutes": agent.minutes}  # fmt: skip
    elif variant == 1:
        body |= {"attendees": [email.title()], "start": _offset(start, -5), "end": _offset(end, 3)}
    elif variant == 2:
        body |= {"attendees": [f"Slot {agent.slot} <{email}>"], "start": instant(start),
                 "duration": f"PT{agent.minutes}M"}  # fmt: skip
    else:  # a local wall time and its zone (no DST in Kolkata: never a gap or a fold)
        local = start.astimezone(timezone(timedelta(hours=5, minutes=30)))
        body |= {"attendees": [email], "start": local.strftime("%Y-%m-%dT%H:%M:%S"),
                 "timezone": "Asia/Kolkata", "duration_minutes": agent.minutes}  # fmt: skip
    if agent.lowers:
        body["priority"] = agent.priority - 5
    body[_THOUGHTS[agent.index % len(_THOUGHTS)]] = "the first call timed out; trying again"
    return body


def _offset(at: datetime, hours: int) -> str:
    return at.astimezone(timezone(timedelta(hours=hours))).isoformat()


def race_tasks(racers: list[Agent], at: datetime) -> list[list[list[Call]]]:
    """One task per agent: its claim (with a duplicate at once), retry, commit."""
    tasks = []
    for agent in racers:
        a = agent.index

        def create(body: dict[str, Any], a: int = a) -> Call:
            return {"op": "post", "path": "/v1/holds", "body": body, "key": a,
                    "id": f"agent-{a}", "intent": f"agent-{a}"}  # fmt: skip

        first = [create(original(agent, at))]
        if a % 4 == 0:
            first.append(create(original(agent, at)))
        steps = [first]
        if a % 3 == 0:
            steps.append([create(rephrased(agent, at))])
        if a % 5 == 0:
            steps.append([{"op": "commit", "of": f"agent-{a}", "key": a, "intent": f"commit-{a}"}])
        tasks.append(steps)
    return tasks
