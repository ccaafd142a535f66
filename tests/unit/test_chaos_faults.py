"""The chaos harness's plan (benchmarks/chaos_faults.py): seeded, and its rewordings are
the same intent, by the engine's own fingerprint (engine/rules/fingerprint.py)."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from typing import Any

import pytest

from slotward.benchmarks.chaos_faults import (
    SPELLINGS,
    TENANT,
    Intent,
    drifted,
    make_plan,
    person,
    spelled,
)
from slotward.engine.rules.attendees import attendee_id_for_email, parse_attendees
from slotward.engine.rules.fingerprint import (
    DEFAULT_THOUGHT_FIELDS,
    check_step,
    derive_key,
    hold_intent,
    intent_fingerprint,
    strip_thoughts,
)
from slotward.engine.rules.timenorm import normalize_interval
from slotward.engine.tools import CREATE_HOLD

AT = datetime(2030, 10, 14, 14, 0, tzinfo=UTC)
ALIASES = dict(CREATE_HOLD.aliases)


def _arguments(path: str, body: dict[str, Any]) -> dict[str, Any]:
    """The create's fields as the engine takes them, from either path."""
    if path == "tool":
        assert body["tool"] == CREATE_HOLD.name
        fields = {ALIASES.get(k, k): v for k, v in body["arguments"].items()}
    else:
        fields = dict(body)
    return strip_thoughts(fields, DEFAULT_THOUGHT_FIELDS)


def _intent_of(path: str, body: dict[str, Any]) -> dict[str, Any]:
    args = _arguments(path, body)
    ids = [attendee_id_for_email(TENANT, ref.value) for ref in parse_attendees(args["attendees"])]
    interval = normalize_interval(
        start=args["start"], end=args.get("end"), duration_minutes=args.get("duration_minutes"),
        duration=args.get("duration"), timezone=args.get("timezone"),
    )  # fmt: skip
    return hold_intent(ids, interval)


def _key(path: str, body: dict[str, Any]) -> str:
    return derive_key(tenant=TENANT, workflow=body["workflow_id"], tool=CREATE_HOLD.name,
                      intent=_intent_of(path, body), step=check_step(body["step"]))  # fmt: skip


@pytest.mark.parametrize("who", [(person(3),), (person(1), person(7))])
@pytest.mark.parametrize("minutes", [30, 60])
def test_every_spelling_is_the_same_intent_under_the_same_key(
    who: tuple[str, ...], minutes: int
) -> None:
    spellings = [spelled(s, who, AT, minutes, workflow="chaos-1-2", step=1)
                 for s in range(len(SPELLINGS))]  # fmt: skip
    keys = {_key(path, body) for path, body in spellings}
    assert len(keys) == 1
    assert {path for path, _ in spellings} == {"holds", "tool"}
    # Reworded for real: no two spellings send the same body.
    assert len({repr(body) for _, body in spellings}) == len(SPELLINGS)


def test_another_slot_step_or_length_is_another_key() -> None:
    """The comparison above can fail: what is identity changes the key."""
    base = _key(*spelled(0, (person(1),), AT, 30, workflow="wf", step=1))
    others = [
        spelled(0, (person(1),), AT + timedelta(minutes=30), 30, workflow="wf", step=1),
        spelled(0, (person(1),), AT, 60, workflow="wf", step=1),
        spelled(0, (person(2),), AT, 30, workflow="wf", step=1),
        spelled(3, (person(1),), AT, 30, workflow="wf", step=2),
    ]
    assert base not in {_key(path, body) for path, body in others}


def test_a_drifted_step_is_another_key_for_the_same_intent() -> None:
    path, body = spelled(5, (person(4),), AT, 30, workflow="wf", step=drifted(1))
    plain = spelled(0, (person(4),), AT, 30, workflow="wf", step=1)
    assert _key(path, body) != _key(*plain)
    fingerprints = {
        intent_fingerprint(tenant=TENANT, tool=CREATE_HOLD.name, intent=_intent_of(p, b))
        for p, b in (plain, (path, body))
    }  # fmt: skip
    assert len(fingerprints) == 1


def test_the_same_seed_makes_the_same_plan_and_another_seed_another() -> None:
    assert make_plan(30, 8, seed=7) == make_plan(30, 8, seed=7)
    assert make_plan(30, 8, seed=7) != make_plan(30, 8, seed=8)


def test_a_plan_has_every_fault_rivals_and_shared_attendees() -> None:
    plan = make_plan(40, 10, seed=0)
    intents: list[Intent] = [i for agent in plan for i in agent.intents]
    assert len(plan) == 40
    assert len(intents) == 400
    faults = Counter(name for i in intents for name in i.faults.names())
    assert set(faults) == {"lost-discard", "lost-cut", "lost-commit", "drift", "duplicate",
                           "release"}  # fmt: skip
    assert {i.faults.first for i in intents} >= {0, 5, 6}  # tool calls among the first calls
    assert len({a.priority for a in plan}) > 1  # higher rivals, and equal ones
    attendees = Counter(a for i in intents for a in i.attendees)
    assert len(attendees) == 10  # one for every four agents, shared by all
    assert len({i.workflow for i in intents}) == 400


def test_a_plan_needs_agents_and_intents() -> None:
    with pytest.raises(ValueError, match="at least one agent"):
        make_plan(0, 5, seed=0)
    with pytest.raises(ValueError, match="one intent"):
        make_plan(5, 0, seed=0)


def test_every_spelling_sends_only_fields_the_tool_declares() -> None:
    """A spelling the server would refuse (422 unknown field) would end its intents
    ``unexpected``; caught here for every spelling, not only those a plan draws."""
    declared = {f.name for f in CREATE_HOLD.fields}
    allowed_body = declared | {"workflow_id", "step"} | DEFAULT_THOUGHT_FIELDS
    for spelling in range(len(SPELLINGS)):
        path, body = spelled(spelling, (person(1), person(2)), AT, 30, workflow="wf", step=1)
        if path == "tool":
            assert set(body) == {"workflow_id", "step", "tool", "arguments"}
            assert set(body["arguments"]) <= declared | set(ALIASES), spelling
        else:
            assert set(body) <= allowed_body, spelling


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_every_retry_of_a_create_is_spelled_otherwise_than_the_attempt_before(seed: int) -> None:
    """docs/chaos.md: every retry is spelled another way, however the plan drew them."""
    for agent in make_plan(40, 10, seed=seed):
        for intent in agent.intents:
            ways = [intent.faults.spelling(attempt) for attempt in range(13)]
            assert ways[0] == intent.faults.first
            assert all(0 <= way < len(SPELLINGS) for way in ways)
            assert all(a != b for a, b in pairwise(ways)), (intent, ways)
            bodies = [repr(spelled(w, intent.attendees, AT, intent.minutes,
                                   workflow=intent.workflow, step=1)) for w in ways]  # fmt: skip
            assert all(a != b for a, b in pairwise(bodies))
