"""The seeded plan of ``slotward bench chaos``: who wants what, and which faults meet it.

Everything an agent will try is drawn here from ``random.Random(seed)``, before
any call is made, so one seed is one plan (the timing of a run still varies:
which rival gets there first, when the server is killed). An intent is "book
these attendees for D minutes at slot k, then commit it"; attendees come from
a pool shared by all agents, so agents race for them. The faults an intent
meets (:class:`Faults`, each named in docs/chaos.md):

- ``lose``: the create's first answer is lost after the server acted
  (``discard``: read and thrown away; ``cut``: the connection dropped by the
  client a few milliseconds in, so the server may or may not have acted);
- ``lose_commit``: the same for the commit's first answer;
- ``rewordings``: the spelling of each retry (:func:`spelled`; never the
  spelling of the attempt before it, :meth:`Faults.spelling`): another title,
  key order, email case and spaces, UTC offset, a local time with
  ``timezone``, ``end`` against ``duration_minutes`` or ``duration``, the
  ``/v1/tool-calls`` envelope with ``start_time``/``end_time``;
- ``drift``: once booked, the create sent again under another ``step``, as an
  agent that lost count after context compaction;
- ``duplicate``: the first create sent twice at once;
- ``release``: after the commit, a release (the compensating action).

Every spelling is the same intent: the unit tests run the engine's
fingerprint on each (tests/unit/test_chaos_faults.py).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from typing import Any, Literal

from slotward.engine.tools import CREATE_HOLD

__all__ = [
    "DOMAIN",
    "SLOT_MINUTES",
    "SPELLINGS",
    "TENANT",
    "AgentPlan",
    "Faults",
    "Intent",
    "make_plan",
    "person",
    "spelled",
]

TENANT = "chaos"
DOMAIN = "chaos.example"
SLOT_MINUTES = 30  # the grid of the slots intents ask for
HOLD_TTL_SECONDS = 3600  # a hold outlives a slow run between its create and its commit
_PRIORITIES = (30, 50, 50, 70)  # equal rivals, and higher ones that may preempt
_DRIFT = 1000  # the step a drifted create carries, added to its own
Lose = Literal["none", "discard", "cut"]
Path = Literal["holds", "tool"]


@dataclass(frozen=True)
class Faults:
    lose: Lose
    lose_commit: bool
    rewordings: tuple[int, ...]  # a spelling (index into SPELLINGS) per retry, cycled
    drift: bool
    duplicate: bool
    release: bool
    first: int  # the first call's spelling

    def spelling(self, attempt: int) -> int:
        """The spelling of a create's ``attempt`` (0: the first call): the planned one,
        or the next one when the plan drew the very spelling of the attempt before."""
        way = self.first
        for n in range(1, attempt + 1):
            drawn = self.rewordings[n % len(self.rewordings)]
            way = drawn if drawn != way else (drawn + 1) % len(SPELLINGS)
        return way

    def names(self) -> list[str]:
        """The faults planned, as short words (the demo's table, the report's counts)."""
        out = [f"lost-{self.lose}"] if self.lose != "none" else []
        out += ["lost-commit"] * self.lose_commit + ["drift"] * self.drift
        out += ["duplicate"] * self.duplicate + ["release"] * self.release
        return out


@dataclass(frozen=True)
class Intent:
    agent: int
    index: int
    attendees: tuple[str, ...]  # emails, as the agent would write them
    slot: int  # from the run's first instant, in SLOT_MINUTES
    minutes: int
    faults: Faults

    @property
    def workflow(self) -> str:
        """One workflow per intent: its holds are the intent's (duplicates are counted so)."""
        return f"chaos-{self.agent}-{self.index}"


@dataclass(frozen=True)
class AgentPlan:
    index: int
    priority: int  # its key's
    intents: tuple[Intent, ...]

    @property
    def name(self) -> str:
        return f"agent-{self.index}"


def person(n: int) -> str:
    return f"person-{n}@{DOMAIN}"


def make_plan(agents: int, intents: int, seed: int) -> list[AgentPlan]:
    """The plan of a run: ``agents`` agents of ``intents`` intents each, from ``seed``.

    The pool holds an attendee for every four agents (at least two), and the
    slots span twice as many half hours as an agent has intents: enough
    contention that some claims meet a rival, enough room that most land.
    """
    if agents < 1 or intents < 1:
        raise ValueError("chaos needs at least one agent and one intent")
    rng = random.Random(seed)
    pool = max(2, agents // 4)
    slots = max(8, 2 * intents)
    return [
        AgentPlan(a, rng.choice(_PRIORITIES),
                  tuple(_intent(rng, a, i, pool, slots) for i in range(intents)))
        for a in range(agents)
    ]  # fmt: skip


def _intent(rng: random.Random, agent: int, index: int, pool: int, slots: int) -> Intent:
    count = 1 if rng.random() < 0.7 else 2
    who = tuple(person(p) for p in rng.sample(range(pool), min(count, pool)))
    roll = rng.random()
    lose: Lose = "discard" if roll < 0.2 else "cut" if roll < 0.35 else "none"
    faults = Faults(
        lose=lose,
        lose_commit=rng.random() < 0.2,
        rewordings=tuple(rng.randrange(len(SPELLINGS)) for _ in range(4)),
        drift=rng.random() < 0.2,
        duplicate=rng.random() < 0.2,
        release=rng.random() < 0.15,
        first=rng.randrange(len(SPELLINGS)) if rng.random() < 0.3 else 0,
    )
    return Intent(agent, index, who, rng.randrange(slots), rng.choice((30, 60)), faults)


def drifted(step: int) -> int:
    return step + _DRIFT


# Each spelling: (attendees, start, minutes, workflow, step, title) -> (path, body).
def _plain(who: list[str], at: datetime, minutes: int, common: dict[str, Any]) -> dict[str, Any]:
    return {**common, "attendees": who, "start": _z(at), "duration_minutes": minutes}


def _reordered(
    who: list[str], at: datetime, minutes: int, common: dict[str, Any]
) -> dict[str, Any]:
    body = {"duration_minutes": minutes, "start": _z(at), "attendees": who[::-1], **common}
    body["title"] = f"Re: {common['title']} (rescheduled wording)"
    body["reasoning"] = "the first call timed out; trying again"
    return dict(reversed(body.items()))


def _cased(who: list[str], at: datetime, minutes: int, common: dict[str, Any]) -> dict[str, Any]:
    end = at + timedelta(minutes=minutes)
    return {**common, "attendees": [f"  {w.upper()} " for w in who],
            "start": _offset(at, 2), "end": _offset(end, 2)}  # fmt: skip


def _local(who: list[str], at: datetime, minutes: int, common: dict[str, Any]) -> dict[str, Any]:
    # Kolkata has no daylight saving time: a local time there is never a gap or a fold
    local = at.astimezone(timezone(timedelta(hours=5, minutes=30)))
    return {**common, "attendees": [w.title() for w in who], "timezone": "Asia/Kolkata",
            "start": local.strftime("%Y-%m-%dT%H:%M:%S"), "duration": f"PT{minutes}M"}  # fmt: skip


def _mixed(who: list[str], at: datetime, minutes: int, common: dict[str, Any]) -> dict[str, Any]:
    end = at + timedelta(minutes=minutes)
    named = [f"Person {i} <{w}>" for i, w in enumerate(who)]
    return {**common, "attendees": named, "start": _offset(at, -5), "end": _z(end),
            "agent_thought": "context was compacted; booking again"}  # fmt: skip


def _tool(who: list[str], at: datetime, minutes: int, common: dict[str, Any]) -> dict[str, Any]:
    end = at + timedelta(minutes=minutes)
    args = {"end_time": _offset(end, 9), "start_time": _z(at), "title": common["title"],
            "attendees": [w.swapcase() for w in who],
            "hold_ttl_seconds": HOLD_TTL_SECONDS}  # fmt: skip
    return {"workflow_id": common["workflow_id"], "step": common["step"],
            "tool": CREATE_HOLD.name, "arguments": args}  # fmt: skip


def _tool_duration(
    who: list[str], at: datetime, minutes: int, common: dict[str, Any]
) -> dict[str, Any]:
    args = {"attendees": [f" {w} " for w in who], "start_time": _offset(at, 2),
            "duration_minutes": minutes, "title": "booking (retry)",
            "hold_ttl_seconds": HOLD_TTL_SECONDS}  # fmt: skip
    return {"tool": CREATE_HOLD.name, "arguments": args, "step": common["step"],
            "workflow_id": common["workflow_id"]}  # fmt: skip


# (name, on /v1/tool-calls, the body's maker); the index is what a plan names.
SPELLINGS = (
    ("plain", False, _plain),
    ("reordered", False, _reordered),
    ("cased+02:00", False, _cased),
    ("local-time", False, _local),
    ("named-05:00", False, _mixed),
    ("tool-call", True, _tool),
    ("tool-duration", True, _tool_duration),
)


def spelled(
    spelling: int, who: tuple[str, ...], at: datetime, minutes: int, *, workflow: str, step: int
) -> tuple[Path, dict[str, Any]]:
    """The create of ``who`` at ``at`` for ``minutes``, spelled the ``spelling`` way:
    where it goes (``holds``: POST /v1/holds; ``tool``: POST /v1/tool-calls) and its body."""
    _, tool, make = SPELLINGS[spelling % len(SPELLINGS)]
    common = {"workflow_id": workflow, "step": step, "title": f"chaos {workflow}",
              "hold_ttl_seconds": HOLD_TTL_SECONDS}  # fmt: skip
    return ("tool" if tool else "holds"), make(list(who), at, minutes, common)


def _z(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _offset(at: datetime, hours: int) -> str:
    return at.astimezone(timezone(timedelta(hours=hours))).isoformat()
