"""A chaos agent (benchmarks/chaos_agents.py) judges every answer it gets, even those a
fault throws away: a server that answers a drifted create, a duplicate's twin or a lost
first answer wrongly makes the run fail.

The server here is a small aiohttp app that answers as it is told, wrongly on purpose:
a real slotward answers rightly, and the harness must notice when one does not.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
from aiohttp import web
from aiohttp.test_utils import TestServer

from slotward.benchmarks.chaos_agents import Agent, Track
from slotward.benchmarks.chaos_faults import AgentPlan, Faults, Intent, Lose

HOLD = {"id": "hold_1", "token": 1, "status": "held"}
CONFLICT = {"code": "slot_conflict", "status": 409, "detail": "taken", "conflicts": [],
            "alternatives": []}  # fmt: skip
Create = Callable[[dict[str, Any], int], Awaitable[web.Response]]


def _created(hold: dict[str, Any] = HOLD, *, replayed: bool = False) -> web.Response:
    headers = {"Idempotency-Key": "idem_a", "Idempotent-Replayed": str(replayed).lower()}
    return web.json_response(hold, status=201, headers=headers)


async def _run(
    create: Create, commit_status: int = 200, gone: frozenset[str] = frozenset(), **faults: Any
) -> tuple[Track, Agent]:
    """One intent of one agent against a server whose creates ``create`` answers (the body
    and how many creates came before it); commits are 200, or ``commit_status``, or 409
    ``hold_preempted`` for the holds ``gone``."""
    seen = {"creates": 0}

    async def on_create(request: web.Request) -> web.Response:
        n = seen["creates"]
        seen["creates"] += 1
        return await create(await request.json(), n)

    async def on_commit(request: web.Request) -> web.Response:
        if commit_status != 200 or request.match_info["id"] in gone:
            preempted = {"code": "hold_preempted", "status": 409, "detail": "preempted"}
            return web.json_response(preempted, status=409)
        return web.json_response({**HOLD, "id": request.match_info["id"], "status": "committed"})

    app = web.Application()
    app.router.add_post("/v1/holds", on_create)
    app.router.add_post("/v1/holds/{id}/commit", on_commit)
    lose: Lose = faults.pop("lose", "none")
    plan = Faults(lose=lose, lose_commit=False, rewordings=(1, 2, 3, 4), drift=False,
                  duplicate=False, release=False, first=0)  # fmt: skip
    plan = Faults(**{**plan.__dict__, **faults})
    intent = Intent(0, 0, ("person-0@chaos.example",), 0, 30, plan)
    server = TestServer(app)
    await server.start_server()
    try:
        agent = Agent(AgentPlan(0, 50, (intent,)), "sk_test", str(server.make_url("")).rstrip("/"),
                      datetime.now(UTC) + timedelta(days=1), [], 0)  # fmt: skip
        async with aiohttp.ClientSession() as session:
            await asyncio.wait_for(agent.run(session), 30)
    finally:
        await server.close()
    return agent.tracks[0], agent


def _drifted(answer: Callable[[], web.Response]) -> Create:
    async def create(body: dict[str, Any], n: int) -> web.Response:
        return answer() if body["step"] >= 1000 else _created()

    return create


async def test_a_drifted_create_replaying_the_live_hold_lands() -> None:
    track, _ = await _run(_drifted(lambda: _created(replayed=True)), drift=True)
    assert (track.outcome, track.injected) == ("landed", ["drift"])


async def test_a_drifted_create_refused_is_unexpected() -> None:
    track, _ = await _run(_drifted(lambda: web.json_response(CONFLICT, status=409)), drift=True)
    assert track.outcome == "unexpected"
    assert "drift" in str(track.reason)


async def test_a_drifted_create_answered_fresh_or_about_another_hold_is_unexpected() -> None:
    for answer in (lambda: _created(), lambda: _created({**HOLD, "id": "hold_2"}, replayed=True)):
        track, _ = await _run(_drifted(answer), drift=True)
        assert track.outcome == "unexpected", track.reason


async def test_a_drifted_create_not_replayed_is_excused_when_the_hold_was_preempted() -> None:
    """A rival preempted the hold before the drift came: no live hold to replay, and the
    commit says so; the intent claims the slot again (here, until its claims run out)."""
    answer = _drifted(lambda: web.json_response(CONFLICT, status=409))
    track, _ = await _run(answer, commit_status=409, drift=True)
    assert (track.outcome, track.reason) == ("refused", "hold_preempted")


async def test_a_hold_the_drift_booked_afresh_once_the_first_was_preempted_is_the_intents() -> None:
    """The first hold was preempted before the drift came, so the drift booked anew (a new
    key, DESIGN 3): the next claim gets that hold back, and the intent lands on it."""

    async def create(body: dict[str, Any], n: int) -> web.Response:
        if body["step"] >= 1000:
            return _created({**HOLD, "id": "hold_2"})
        if body["step"] == 1:
            return _created()
        return _created({**HOLD, "id": "hold_2"}, replayed=True)

    track, _ = await _run(create, gone=frozenset({"hold_1"}), drift=True)
    assert (track.outcome, track.hold_id) == ("landed", "hold_2"), track.reason


def _stamped(created: datetime) -> web.Response:
    return _created({**HOLD, "created_at": created.isoformat()})


async def _twins(first: web.Response, second: web.Response) -> Track:
    async def create(body: dict[str, Any], n: int) -> web.Response:
        await asyncio.sleep(0.05 if n == 0 else 0)
        return first if n == 0 else second

    track, _ = await _run(create, duplicate=True)
    return track


async def test_twins_about_the_same_hold_land() -> None:
    track = await _twins(_created(), _created(replayed=True))
    assert track.outcome == "landed", track.reason


async def test_a_twin_answered_422_is_unexpected() -> None:
    bogus = web.json_response({"code": "validation_error", "status": 422}, status=422)
    track = await _twins(_created(), bogus)
    assert track.outcome == "unexpected"
    assert "422" in str(track.reason)


async def test_twins_about_two_holds_are_unexpected() -> None:
    track = await _twins(_created(), _created({**HOLD, "id": "hold_2"}, replayed=True))
    assert track.outcome == "unexpected"


async def test_a_twin_refused_while_the_other_holds_is_unexpected() -> None:
    earlier = datetime.now(UTC) - timedelta(seconds=5)  # the hold existed when it was refused
    track = await _twins(_stamped(earlier), web.json_response(CONFLICT, status=409))
    assert track.outcome == "unexpected"
    track = await _twins(_created(), web.json_response(CONFLICT, status=409))  # when? unknown
    assert track.outcome == "unexpected"


async def test_a_twin_refused_before_the_other_twin_made_its_hold_is_excused() -> None:
    """A refusal is not recorded under the key (DESIGN 4): the rival may have left the slot
    before the other twin came, and that twin's hold is the intent's."""
    later = datetime.now(UTC) + timedelta(seconds=5)
    track = await _twins(_stamped(later), web.json_response(CONFLICT, status=409))
    assert track.outcome == "landed", track.reason


async def test_twins_both_refused_are_refused() -> None:
    track = await _twins(web.json_response(CONFLICT, status=409),
                         web.json_response(CONFLICT, status=409))  # fmt: skip
    assert (track.outcome, track.reason) == ("refused", "slot_conflict")


def _first_then_hold(first: Callable[[], web.Response]) -> Create:
    async def create(body: dict[str, Any], n: int) -> web.Response:
        return first() if n == 0 else _created(replayed=True)

    return create


async def test_a_500_to_a_discarded_first_create_is_a_server_error() -> None:
    answer = _first_then_hold(lambda: web.json_response({"code": "internal"}, status=500))
    track, agent = await _run(answer, lose="discard")
    assert agent.server_errors == 1
    assert "lost-create" in track.injected


async def test_a_422_to_a_discarded_first_create_is_unexpected() -> None:
    answer = _first_then_hold(lambda: web.json_response({"code": "bogus"}, status=422))
    track, _ = await _run(answer, lose="discard")
    assert track.outcome == "unexpected"
    assert "422" in str(track.reason)


async def test_a_refusal_or_a_hold_discarded_is_an_ordinary_lost_answer() -> None:
    for first in (lambda: _created(), lambda: web.json_response(CONFLICT, status=409)):
        track, agent = await _run(_first_then_hold(first), lose="discard")
        assert (track.outcome, agent.server_errors) == ("landed", 0), track.reason


async def test_a_retried_create_is_spelled_otherwise_even_if_the_plan_drew_the_same() -> None:
    bodies: list[dict[str, Any]] = []

    async def create(body: dict[str, Any], n: int) -> web.Response:
        bodies.append(body)
        return _created(replayed=n > 0)

    await _run(create, lose="discard", rewordings=(0, 0, 0, 0))
    assert len(bodies) == 2
    assert bodies[0] != bodies[1]
