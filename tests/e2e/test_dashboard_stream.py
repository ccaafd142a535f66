"""GET /v1/audit/stream over real HTTP: server-sent events, on SQLite and PostgreSQL.

The stream polls fast here (a setting); every wait for an event is bounded
(a readiness wait that only stops a test that would hang), and nothing is
asserted about how long anything took.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from sqlalchemy import Engine

from slotward.api import service
from slotward.api.bootstrap import bootstrap, open_store
from slotward.api.config import Config
from slotward.api.http.app import build_app
from slotward.api.http.edges import build_runner
from slotward.engine.clock import FixedClock
from slotward.engine.model import Principal
from tests.e2e.conftest import HOLD_BODY, START, Client, Server
from tests.e2e.signed_in import sign_in

PATH = "/v1/audit/stream"
WITHIN = 30.0  # seconds: a bound on a wait that only stops a hung test
FAST = {"stream_poll_seconds": 0.02, "stream_keepalive_seconds": 0.2, "key_cache_seconds": 0.1}


@pytest.fixture
def config_overrides() -> dict[str, Any]:
    return dict(FAST)


@dataclass
class Events:
    """An open event stream, read frame by frame."""

    response: aiohttp.ClientResponse
    frames: list[dict[str, str]] = field(default_factory=list)

    async def frame(self) -> dict[str, str]:
        """The next frame (``{"comment": ...}`` for a comment line), bounded."""
        return await asyncio.wait_for(self._frame(), WITHIN)

    async def _frame(self) -> dict[str, str]:
        fields: dict[str, str] = {}
        while True:
            raw = await self.response.content.readline()
            if not raw:
                raise EOFError("the stream ended")
            line = raw.decode().rstrip("\n")
            if not line:
                if fields:
                    self.frames.append(fields)
                    return fields
                continue
            name, _, value = line.partition(":")
            fields[name or "comment"] = value.removeprefix(" ")

    async def audit(self) -> tuple[int, dict[str, Any]]:
        """The next audit event: its id and its entry."""
        while True:
            frame = await self.frame()
            if frame.get("event") == "audit":
                return int(frame["id"]), json.loads(frame["data"])

    async def ended(self) -> bool:
        """Whether the server ends the stream (read to its end, bounded)."""
        await asyncio.wait_for(self.response.content.read(), WITHIN)
        return self.response.content.at_eof()


@contextlib.asynccontextmanager
async def events(
    session: aiohttp.ClientSession, url: str, headers: dict[str, str]
) -> AsyncIterator[Events]:
    async with session.get(url, headers=headers) as response:
        assert response.status == 200, await response.text()
        assert response.headers["Content-Type"] == "text/event-stream; charset=utf-8"
        assert response.headers["Cache-Control"] == "no-store"
        stream = Events(response)
        assert await stream.frame() == {"retry": "2000"}  # first, and it sends the head
        yield stream


def _open(server: Server, client: Client, query: str = "", **headers: str) -> Any:
    auth = {"Authorization": f"Bearer {client.secret}"}
    return events(server.session, f"{server.base}{PATH}{query}", {**auth, **headers})


async def _entries(client: Client) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = (await client.get("/v1/audit")).json["items"]
    return items


async def _book(agent: Client, n: int) -> None:
    made = await agent.create({**HOLD_BODY, "workflow_id": f"wf-stream-{n}",
                               "start": f"2030-10-14T{8 + n:02d}:00:00Z"})  # fmt: skip
    assert made.status == 201, made.body[:300]


async def test_an_entry_appended_once_connected_arrives_as_get_audit_shows_it(
    server: Server,
) -> None:
    agent, reviewer = await server.key(), await server.key(agent="rev", role="reviewer")
    await _book(agent, 1)  # before the stream: not in it (it starts from the head)
    async with _open(server, reviewer) as stream:
        await _book(agent, 2)
        seq, entry = await stream.audit()
        assert (seq, entry) == (2, (await _entries(reviewer))[1])
        await _book(agent, 3)
        assert (await stream.audit())[0] == 3


async def test_a_stream_resumes_after_last_event_id_which_wins_over_after(
    server: Server,
) -> None:
    agent = await server.key()
    for n in range(3):
        await _book(agent, n)
    cases = [
        ("", {"Last-Event-ID": "1"}, 2), ("?after=0", {}, 1), ("?after=2", {}, 3),
        ("?after=0", {"Last-Event-ID": "2"}, 3), ("", {"Last-Event-ID": ""}, None),
    ]  # fmt: skip
    for query, headers, first in cases:
        async with _open(server, agent, query, **headers) as stream:
            if first is None:  # an empty Last-Event-ID (a first try): from the head
                await _book(agent, 5)
                first = 4
            assert (await stream.audit())[0] == first, (query, headers)


async def test_a_signed_in_page_streams_with_its_cookie_alone(server: Server) -> None:
    browser = await sign_in(server)
    agent = await server.key()
    url = f"{server.base}{PATH}?after=0"
    async with events(server.session, url, browser.headers()) as stream:
        await _book(agent, 1)
        seq, entry = await stream.audit()
        assert (seq, entry["action"]) == (1, "hold.create")


async def test_another_tenants_stream_never_carries_this_ones_entries(server: Server) -> None:
    agent = await server.key()
    await _book(agent, 1)
    stranger = await server.key(tenant="globex", agent="other")
    async with _open(server, stranger, "?after=0") as stream:
        theirs = await stranger.create({**HOLD_BODY, "workflow_id": "wf-globex"})
        seq, entry = await stream.audit()
        assert (seq, entry["hold_id"]) == (1, theirs.json["id"])  # its own seq 1, not acme's


async def test_a_quiet_stream_sends_keepalive_comments(server: Server) -> None:
    reviewer = await server.key(role="reviewer")
    async with _open(server, reviewer) as stream:
        assert await stream.frame() == {"comment": "keep-alive"}


async def test_a_revoked_key_or_session_ends_its_stream(server: Server) -> None:
    browser = await sign_in(server)
    [(key_id,)] = server.sql("SELECT key_id FROM sessions")
    url = f"{server.base}{PATH}"
    async with events(server.session, url, browser.headers()) as stream:
        await service.withdraw_key(server.services.store, key_id, server.clock)
        assert await stream.ended()  # the session is read again: refused at once
    keyed = await server.key(role="reviewer", agent="keyed")
    async with _open(server, keyed) as stream:
        [(kid,)] = server.sql("SELECT id FROM api_keys WHERE agent_id = ?", "keyed")
        await service.withdraw_key(server.services.store, kid, server.clock)
        server.clock.advance(1)  # past the key cache's trust (0.1 s of the server's clock)
        assert await stream.ended()


HOSTILE_AFTER = ["-1", "abc", "1.5", "1e3", "0x10", " 1", "１", "²", str(2**53), "9" * 16, ""]
HOSTILE_IDS = ["abc", "-1", "1.0", "１", "9" * 16, "1 2", "0x1", "\u00e9"]


async def test_hostile_positions_are_refused_before_anything_streams(server: Server) -> None:
    reviewer = await server.key(role="reviewer")
    refusals: list[tuple[str, dict[str, str]]] = [(f"?after={v}", {}) for v in HOSTILE_AFTER]
    refusals += [("", {"Last-Event-ID": v}) for v in HOSTILE_IDS]
    refusals += [("?after=1&after=2", {}), ("?from=0", {}), ("?after=1%00", {})]
    for query, headers in refusals:
        answer = await reviewer.open_stream(PATH + query, headers=headers)
        assert answer.status == 422, (query, headers, answer.status)
        assert answer.headers["Content-Type"].startswith("application/problem+json")
    anonymous = await server.anonymous().open_stream(PATH)
    assert (anonymous.status, anonymous.json["code"]) == (401, "missing_api_key")
    fine = await reviewer.open_stream(PATH + "?after=0", headers={"Last-Event-ID": " 7 "})
    assert fine.status == 200


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
async def test_shutdown_with_an_open_stream_ends_it_and_does_not_wait(
    database: tuple[str, Engine],
) -> None:
    """The runner would wait an hour for open requests; the stream ends on shutdown."""
    url, _ = database
    config = Config(db_url=url, stream_poll_seconds=0.02, stream_keepalive_seconds=0.2)
    clock = FixedClock(START)
    services = await bootstrap(config, store=await open_store(config), clock=clock)
    runner = build_runner(build_app(services, config, sweep=False, relay=False), config,
                          shutdown_timeout=3600)  # fmt: skip
    await runner.setup()
    stopping: asyncio.Future[None] | None = None
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        host, port = runner.addresses[0][:2]
        reviewer = Principal("acme", "rev", "reviewer", 0)
        key = await service.issue_key(services.store, reviewer, clock, services.ids,
                                      services.keys.hasher)  # fmt: skip
        async with aiohttp.ClientSession() as session:
            headers = {"Authorization": f"Bearer {key.secret}"}
            async with events(session, f"http://{host}:{port}{PATH}", headers) as stream:
                stopping = asyncio.ensure_future(runner.cleanup())
                assert await stream.ended()  # a clean end of the body, not a reset
                await asyncio.wait_for(stopping, WITHIN)  # bounded: the hour never comes
    finally:
        if stopping is None:
            await runner.cleanup()
