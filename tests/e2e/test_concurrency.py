"""Races over real HTTP, then the invariants checked in the database."""

from __future__ import annotations

import asyncio
import random
from typing import Any

from tests.e2e.conftest import Server


async def test_fifty_identical_concurrent_requests_make_one_hold(
    server: Server, hold_body: dict[str, Any]
) -> None:
    agent = await server.key()
    answers = await asyncio.gather(*(agent.create(hold_body) for _ in range(50)))
    # Writers serialize, so an in-flight duplicate waits for the first request's
    # transaction and replays its answer (DESIGN 7 allows that instead of 409
    # request_in_progress): every duplicate gets the first answer.
    assert [a.status for a in answers] == [201] * 50
    assert len({a.body for a in answers}) == 1  # identical bodies
    assert len({a.key for a in answers}) == 1
    assert sum(not a.replayed for a in answers) == 1  # exactly one fresh answer
    assert server.sql("SELECT count(*) FROM holds") == [(1,)]
    assert server.sql("SELECT count(*) FROM ledger") == [(1,)]


async def test_fifty_workflows_racing_for_one_slot_have_one_winner(server: Server) -> None:
    agents = [await server.key(agent=f"agent-{i}") for i in range(50)]
    answers = await asyncio.gather(
        *(
            agent.create(
                {
                    "workflow_id": f"wf-{i}",
                    "attendees": ["room-1@example.com", f"person-{i}@example.com"],
                    "start": "2030-10-14T14:00:00Z",
                    "duration_minutes": 60,
                }
            )
            for i, agent in enumerate(agents)
        )
    )
    statuses = sorted(a.status for a in answers)
    assert statuses.count(201) == 1
    assert statuses.count(409) == 49
    assert all(a.json["code"] == "slot_conflict" for a in answers if a.status == 409)
    assert server.overlapping_pairs() == 0


async def test_mixed_race_keeps_every_attendee_free_of_overlaps(server: Server) -> None:
    rng = random.Random(7)
    priorities = [10, 50, 90]
    agents = [await server.key(agent=f"a{i}", priority=rng.choice(priorities)) for i in range(30)]
    rooms = [f"room-{i}@example.com" for i in range(4)]

    def claim(i: int) -> dict[str, Any]:
        start_minute = rng.choice([0, 15, 30, 45, 60])
        return {
            "workflow_id": f"wf-{i % 20}",
            "step": i % 3,
            "attendees": rng.sample(rooms, rng.randint(1, 2)),
            "start": f"2030-10-14T{14 + start_minute // 60:02d}:{start_minute % 60:02d}:00Z",
            "duration_minutes": rng.choice([15, 30, 45]),
        }

    calls = [(rng.choice(agents), claim(i)) for i in range(200)]
    # Duplicate a third of the calls, as retrying agents would.
    calls += [(agent, dict(body)) for agent, body in calls[::3]]
    rng.shuffle(calls)
    answers = await asyncio.gather(*(agent.create(body) for agent, body in calls))
    assert {a.status for a in answers} <= {201, 409}
    assert server.overlapping_pairs() == 0
    preemptions = server.sql(
        """SELECT loser.priority, winner.priority FROM holds loser
           JOIN holds winner ON winner.id = loser.preempted_by
           WHERE loser.status = 'preempted'"""
    )
    assert all(winner > loser for loser, winner in preemptions)
    verify = (await agents[0].get("/v1/audit/verify")).json
    assert verify["ok"] is True
