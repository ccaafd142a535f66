"""Retry storms and the workflow view, over real HTTP on SQLite and PostgreSQL.

The server runs with a threshold of 5 replays per 60 s; the clock is moved by
hand, so "within the window" is exact.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from slotward.api.bootstrap import bootstrap, open_store
from slotward.api.config import Config
from slotward.api.http.app import build_app
from tests.e2e.conftest import Client, Server, serving
from tests.e2e.test_metrics import read_metrics, sample

THRESHOLD = 5
WINDOW = 60


@pytest.fixture
def config_overrides() -> dict[str, Any]:
    return {"storm_replays": THRESHOLD, "storm_window_seconds": WINDOW}


async def _replay(agent: Client, body: dict[str, Any], times: int) -> None:
    """Send the same create ``times`` more times; every one must be a replay."""
    for _ in range(times):
        again = await agent.create(body)
        assert again.status == 201, again.json
        assert again.replayed


async def _booked(agent: Client, body: dict[str, Any]) -> dict[str, Any]:
    first = await agent.create(body)
    assert first.status == 201, first.json
    assert not first.replayed
    doc: dict[str, Any] = first.json
    return doc


async def _storm_entries(agent: Client) -> list[dict[str, Any]]:
    audit = await agent.get("/v1/audit?limit=500")
    assert audit.status == 200
    return [e for e in audit.json["items"] if e["action"] == "workflow.retry_storm"]


def _storm_events(server: Server) -> list[dict[str, Any]]:
    rows = server.sql(
        "SELECT tenant, payload, hold_id FROM outbox WHERE type = ? ORDER BY created_us",
        "workflow.retry_storm",
    )
    return [{"tenant": t, "hold_id": h, **json.loads(p)} for t, p, h in rows]


async def _view(agent: Client, workflow_id: str) -> dict[str, Any]:
    answer = await agent.get(f"/v1/workflows/{workflow_id}")
    assert answer.status == 200, answer.json
    doc: dict[str, Any] = answer.json
    return doc


async def _storms_metric(server: Server) -> float:
    return sample(await read_metrics(server), "slotward_retry_storms_total")


async def _verified(agent: Client) -> None:
    check = await agent.get("/v1/audit/verify")
    assert check.status == 200
    assert check.json["ok"] is True, check.json


async def test_a_retry_storm_is_flagged_once(server: Server, hold_body: dict[str, Any]) -> None:
    agent = await server.key()
    first = await _booked(agent, hold_body)
    server.clock.advance(1)
    await _replay(agent, hold_body, THRESHOLD - 1)
    assert await _storm_entries(agent) == []
    await _replay(agent, hold_body, 1)  # the 5th replay within 60 s

    # Written before the 5th replay was answered.
    [entry] = await _storm_entries(agent)
    at = "2030-10-01T09:00:01Z"
    assert entry["actor"] == "system"
    assert entry["key"] == "workflow:wf-42"
    assert entry["hold_id"] is None
    assert entry["outcome"] == "flagged"
    assert entry["at"] == at
    assert _storm_events(server) == [
        {
            "tenant": "acme",
            "hold_id": None,
            "workflow_id": "wf-42",
            "replays": THRESHOLD,
            "window_seconds": WINDOW,
            "at": at,
        }
    ]
    view = await _view(agent, "wf-42")
    assert view["retry_storm_at"] == at
    assert view["retry_storms"] == 1
    assert await _storms_metric(server) == 1

    # The storm goes on within the window: not flagged again, by this process
    # or after a sweep; the replays still answer the first answer.
    server.clock.advance(30)
    again = await agent.create(hold_body)
    assert again.json == first
    await _replay(agent, hold_body, 3 * THRESHOLD)
    await server.sweep()
    assert len(await _storm_entries(agent)) == 1
    assert len(_storm_events(server)) == 1
    assert await _storms_metric(server) == 1
    assert (await _view(agent, "wf-42"))["replays"] == 4 * THRESHOLD + 1
    await _verified(agent)


async def test_replays_below_the_threshold_are_not_flagged(
    server: Server, hold_body: dict[str, Any]
) -> None:
    agent = await server.key()
    hold = await _booked(agent, hold_body)
    await _replay(agent, hold_body, THRESHOLD - 2)
    commit = await agent.commit(hold["id"], hold["token"])
    assert commit.status == 200
    again = await agent.commit(hold["id"], hold["token"])  # a replayed commit counts too
    assert again.replayed
    await server.sweep()
    assert await _storm_entries(agent) == []
    assert _storm_events(server) == []
    assert await _storms_metric(server) == 0
    view = await _view(agent, "wf-42")
    assert view["replays"] == THRESHOLD - 1
    assert view["retry_storm_at"] is None
    assert view["retry_storms"] == 0


async def test_replays_spread_over_more_than_the_window_are_not_flagged(
    server: Server, hold_body: dict[str, Any]
) -> None:
    agent = await server.key()
    await _booked(agent, hold_body)
    # One replay every 15 s: 5 of them span exactly 60 s, so at most 4 fall
    # within any window of 60 s. Sweeps in between hand the counts over.
    for _ in range(2 * THRESHOLD):
        await _replay(agent, hold_body, 1)
        await server.sweep()
        server.clock.advance(WINDOW / 4)
    assert await _storm_entries(agent) == []
    assert _storm_events(server) == []
    assert (await _view(agent, "wf-42"))["replays"] == 2 * THRESHOLD


async def test_spread_out_replays_handed_over_late_are_not_flagged(
    server: Server, hold_body: dict[str, Any]
) -> None:
    agent = await server.key()
    await _booked(agent, hold_body)
    # The same pace as above, but all handed over in one late sweep: what counts
    # is when the replays happened, not when they were handed over.
    for _ in range(2 * THRESHOLD):
        await _replay(agent, hold_body, 1)
        server.clock.advance(WINDOW / 4)
    await server.sweep()
    assert await _storm_entries(agent) == []
    assert _storm_events(server) == []
    assert (await _view(agent, "wf-42"))["replays"] == 2 * THRESHOLD
    # Only the seconds within the last window are kept (at 09:01:45, 02:00, 02:15).
    assert server.sql("SELECT count(*), sum(count) FROM workflow_replays") == [(3, 3)]


async def test_a_storm_that_goes_on_is_flagged_again_after_a_full_window(
    server: Server, hold_body: dict[str, Any]
) -> None:
    agent = await server.key()
    await _booked(agent, hold_body)
    await _replay(agent, hold_body, THRESHOLD)
    assert len(await _storm_entries(agent)) == 1
    server.clock.advance(WINDOW - 1)
    await _replay(agent, hold_body, THRESHOLD)
    await server.sweep()
    assert len(await _storm_entries(agent)) == 1
    server.clock.advance(1)  # a full window after the first flag
    await _replay(agent, hold_body, THRESHOLD)
    entries = await _storm_entries(agent)
    assert [e["at"] for e in entries] == ["2030-10-01T09:00:00Z", "2030-10-01T09:01:00Z"]
    assert len(_storm_events(server)) == 2
    assert await _storms_metric(server) == 2
    view = await _view(agent, "wf-42")
    assert view["retry_storms"] == 2
    assert view["retry_storm_at"] == "2030-10-01T09:01:00Z"
    await _verified(agent)


async def test_other_workflows_and_tenants_do_not_add_up(
    server: Server, hold_body: dict[str, Any]
) -> None:
    acme = await server.key()
    globex = await server.key(tenant="globex", agent="agent-g")
    bodies = [{**hold_body, "workflow_id": "wf-a"}, {**hold_body, "workflow_id": "wf-b"}]
    bodies[1]["start"] = "2030-10-14T15:00:00Z"
    for body in bodies:
        await _booked(acme, body)
    await _booked(globex, bodies[0])
    for agent, body in ((acme, bodies[0]), (acme, bodies[1]), (globex, bodies[0])):
        await _replay(agent, body, THRESHOLD - 1)
    await server.sweep()
    assert await _storm_entries(acme) == []
    assert await _storm_entries(globex) == []
    assert _storm_events(server) == []
    assert (await _view(acme, "wf-a"))["replays"] == THRESHOLD - 1
    assert (await _view(globex, "wf-a"))["replays"] == THRESHOLD - 1


async def test_the_workflow_view(server: Server, hold_body: dict[str, Any]) -> None:
    agent = await server.key()
    reviewer = await server.key(agent="rev", role="reviewer")
    first = await _booked(agent, hold_body)
    server.clock.advance(10)
    second = await _booked(agent, {**hold_body, "step": 4, "start": "2030-10-14T15:00:00Z"})
    server.clock.advance(10)
    await agent.commit(first["id"], first["token"])
    server.clock.advance(10)
    await _replay(agent, hold_body, 2)  # at 09:00:30

    # Replays this process has not flushed yet already show.
    view = await _view(reviewer, "wf-42")
    assert [h["id"] for h in view["holds"]] == [first["id"], second["id"]]
    assert [h["status"] for h in view["holds"]] == ["committed", "held"]
    assert view["holds"][1] == second
    assert view["workflow_id"] == "wf-42"
    assert view["replays"] == 2
    assert view["last_activity_at"] == "2030-10-01T09:00:30Z"
    assert view["retry_storm_at"] is None
    assert view["retry_storms"] == 0
    assert view["executions"] == []  # hold calls are not generic executions

    await server.sweep()
    server.clock.advance(3600)
    after = await _view(agent, "wf-42")
    assert after["replays"] == 2
    assert after["last_activity_at"] == "2030-10-01T09:00:30Z"
    assert [h["status"] for h in after["holds"]] == ["committed", "expired"]
    assert server.sql(
        "SELECT replays, storms FROM workflow_stats WHERE tenant = ? AND workflow_id = ?",
        "acme",
        "wf-42",
    ) == [(2, 0)]


async def test_unknown_and_other_tenants_workflows_are_not_found(
    server: Server, hold_body: dict[str, Any]
) -> None:
    agent = await server.key()
    outsider = await server.key(tenant="globex", agent="agent-g")
    await _booked(agent, hold_body)
    await _replay(agent, hold_body, 1)
    await server.sweep()
    for client, workflow_id in ((agent, "wf-nope"), (outsider, "wf-42")):
        answer = await client.get(f"/v1/workflows/{workflow_id}")
        assert answer.status == 404
        assert answer.json["code"] == "workflow_not_found"
    assert (await server.anonymous().get("/v1/workflows/wf-42")).status == 401


@pytest.fixture
async def second(server: Server) -> AsyncIterator[Server]:
    """Another server process on the same database, with its own storm watch."""
    url = server.db.url.render_as_string(hide_password=False)
    url = url.replace("sqlite://", "sqlite+aiosqlite://").replace("+psycopg", "+asyncpg")
    config = Config(db_url=url, storm_replays=THRESHOLD, storm_window_seconds=WINDOW)
    services = await bootstrap(config, store=await open_store(config), clock=server.clock)
    async with serving(build_app(services, config, sweep=False)) as base:
        yield Server(services, server.clock, server.db, base, server.session)


async def test_a_storm_spread_over_two_processes_is_flagged_once(
    server: Server, second: Server, hold_body: dict[str, Any]
) -> None:
    agent = await server.key()
    there = Client(server.session, second.base, agent.secret)
    await _booked(agent, hold_body)
    # Each process hands its counts over at every sweep; the store adds up both
    # processes' replays within the window. Neither process alone sees 5.
    await _replay(agent, hold_body, 2)
    await _replay(there, hold_body, 2)
    await server.sweep()
    await second.sweep()
    assert await _storm_entries(agent) == []
    server.clock.advance(10)
    await _replay(agent, hold_body, 1)
    await _replay(there, hold_body, 1)
    await server.sweep()  # 5 replays within the window, over both processes
    await second.sweep()
    [entry] = await _storm_entries(agent)
    assert entry["at"] == "2030-10-01T09:00:10Z"
    [event] = _storm_events(server)
    assert event["replays"] == THRESHOLD
    assert (await _storms_metric(server), await _storms_metric(second)) == (1, 0)
    # Both processes know of it now: more replays within the window flag nothing.
    await _replay(agent, hold_body, THRESHOLD)
    await _replay(there, hold_body, THRESHOLD)
    await server.sweep()
    await second.sweep()
    assert len(await _storm_entries(agent)) == 1
    assert len(_storm_events(server)) == 1
    assert (await _storms_metric(server), await _storms_metric(second)) == (1, 0)
    assert (await _view(agent, "wf-42"))["replays"] == 6 + 2 * THRESHOLD
    await _verified(agent)


async def test_a_storm_split_over_two_processes_is_flagged_at_one_hand_over(
    server: Server, second: Server, hold_body: dict[str, Any]
) -> None:
    agent = await server.key()
    there = Client(server.session, second.base, agent.secret)
    await _booked(agent, hold_body)
    # Within one second, 3 replays here and 2 there, each handed over once.
    await _replay(agent, hold_body, 3)
    await _replay(there, hold_body, 2)
    await server.sweep()
    assert await _storm_entries(agent) == []
    await second.sweep()
    [entry] = await _storm_entries(agent)
    assert (entry["key"], entry["at"]) == ("workflow:wf-42", "2030-10-01T09:00:00Z")
    [event] = _storm_events(server)
    assert event["replays"] == THRESHOLD
    assert (await _storms_metric(server), await _storms_metric(second)) == (0, 1)
    await _verified(agent)


async def test_per_second_counts_leave_with_the_window(
    server: Server, hold_body: dict[str, Any]
) -> None:
    agent = await server.key()
    await _booked(agent, hold_body)
    await _replay(agent, hold_body, 2)
    await server.sweep()
    assert server.sql("SELECT count(*) FROM workflow_replays") == [(1,)]
    server.clock.advance(WINDOW + 1)
    await server.sweep()  # the tenant went quiet: the sweep itself drops them
    assert server.sql("SELECT count(*) FROM workflow_replays") == [(0,)]
    assert (await _view(agent, hold_body["workflow_id"]))["replays"] == 2
