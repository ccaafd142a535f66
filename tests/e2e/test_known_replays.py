"""A retry replayed from what one process knows answers as a process that knows nothing.

Two servers on one database (SQLite file or PostgreSQL), each with its own
memory, as two processes are: ``server`` answered the create and keeps what it
knows of it (api/replays.py); ``other`` never saw it and answers by the whole
path. Whatever changes in the store in between, made through either, the
same retry must get the same answer from both, header for header and byte
for byte, or be decided afresh (an email moved to another attendee: the
directory API refuses that (409 email_in_use), so tests/unit/test_known_replays.py moves one
on the in-memory store).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from sqlalchemy import Engine

from slotward.api.bootstrap import bootstrap, open_store
from slotward.api.config import Config
from slotward.api.http.app import build_app
from slotward.api.replays import sent_as
from slotward.engine.model import Principal
from tests.e2e.conftest import Answer, Client, Server, serving

BODY: dict[str, Any] = {
    "workflow_id": "wf-known",
    "attendees": ["dana@example.com", "Erin <erin@example.com>"],
    "start": "2030-10-14T14:00:00Z",
    "duration_minutes": 30,
    "hold_ttl_seconds": 600,
}
RAW = json.dumps(BODY).encode()
HEADERS = ("Idempotency-Key", "Idempotent-Replayed", "Slotward-Hold-Status")


@pytest.fixture
async def other(server: Server, database: tuple[str, Engine]) -> AsyncIterator[Server]:
    """A second server on the same database, as another process: its own store and memory."""
    config = Config(db_url=database[0])
    services = await bootstrap(config, store=await open_store(config), clock=server.clock)
    app = build_app(services, config, sweep=False, relay=False)
    async with serving(app, config) as base, aiohttp.ClientSession() as session:
        yield Server(services, server.clock, server.db, base, session)
    await services.store.close()


def same(a: Answer, b: Answer) -> None:
    assert (a.status, a.body) == (b.status, b.body)
    assert {h: a.headers.get(h) for h in HEADERS} == {h: b.headers.get(h) for h in HEADERS}


async def clients(server: Server, other: Server) -> tuple[Client, Client]:
    here = await server.key(agent="agent-k")
    there = Client(other.session, other.base, here.secret)
    return here, there


def known_here(server: Server) -> bool:
    principal = Principal("acme", "agent-k", "agent", 50)
    return server.services.known.get(sent_as(principal, RAW)) is not None


async def test_a_retry_known_here_answers_as_elsewhere(server: Server, other: Server) -> None:
    here, there = await clients(server, other)
    first = await here.create(BODY, raw=RAW)
    assert first.status == 201
    assert known_here(server)
    again, elsewhere = await here.create(BODY, raw=RAW), await there.create(BODY, raw=RAW)
    same(again, elsewhere)
    assert again.replayed
    assert again.body == first.body
    assert again.headers["Slotward-Hold-Status"] == "held"
    assert not known_here(other)  # the other answered by the whole path


@pytest.mark.parametrize("change", ["commit", "release", "expire"])
async def test_a_change_made_elsewhere_is_seen(server: Server, other: Server, change: str) -> None:
    here, there = await clients(server, other)
    first = (await here.create(BODY, raw=RAW)).json
    if change == "commit":
        assert (await there.commit(first["id"], first["token"])).status == 200
    elif change == "release":
        assert (await there.release(first["id"])).status == 200
    else:
        server.clock.advance(601)  # past its hold_ttl_seconds, not yet swept
    again, elsewhere = await here.create(BODY, raw=RAW), await there.create(BODY, raw=RAW)
    same(again, elsewhere)
    status = {"commit": "committed", "release": "released", "expire": "expired"}[change]
    assert again.headers["Slotward-Hold-Status"] == status


async def test_another_agent_of_the_workflow_is_answered_the_same(
    server: Server, other: Server
) -> None:
    """A key is the tenant's, the workflow's and the intent's, not the agent's: the
    same call from another agent replays the same hold, by the whole path (the
    known creates are kept by caller), as the agent who made it is by its own."""
    here, _ = await clients(server, other)
    assert (await here.create(BODY, raw=RAW)).status == 201
    stranger = await server.key(agent="agent-s")
    same(await here.create(BODY, raw=RAW), await stranger.create(BODY, raw=RAW))


async def test_attendees_named_by_id_alone_replay_the_same(server: Server, other: Server) -> None:
    admin = await server.key(agent="ops", role="admin")
    put = await admin.post("/v1/attendees", {"id": "dana", "emails": ["d@x.example"]})
    assert put.status == 200
    here, there = await clients(server, other)
    by_id = json.dumps({**BODY, "attendees": ["dana"]}).encode()
    first = await here.create(BODY, raw=by_id)
    assert first.status == 201
    again, elsewhere = await here.create(BODY, raw=by_id), await there.create(BODY, raw=by_id)
    same(again, elsewhere)
    assert again.replayed
    assert again.body == first.body
