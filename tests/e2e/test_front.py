"""The front (api/http/front.py): the creates it answers itself are answered as the
app answers them; every other request goes to aiohttp on the same connection.

Whether the front or aiohttp answered is read from ``slotward_front_handovers``:
a connection is handed over at its first request the front does not serve, for
good, so a connection whose requests were all answered without a hand-over was
answered by the front.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import random
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from slotward.api.bootstrap import Services, bootstrap, open_store
from slotward.api.config import Config
from slotward.api.http.app import build_app
from slotward.api.keys import create_key
from slotward.engine.model import Principal, Role
from tests.e2e.conftest import HOLD_BODY, Server, serving, until
from tests.e2e.rawhttp import BOUND, Raw, connect, parse
from tests.e2e.test_inflight import GatedStore
from tests.e2e.test_metrics import read_metrics, sample

HEALTHZ = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"


def _create(secret: str, body: dict[str, Any], *extra: bytes, close: bool = False) -> bytes:
    return _post("/v1/holds", secret, body, *extra, close=close)


def _post(
    path: str, secret: str, body: dict[str, Any] | None, *extra: bytes, close: bool = False
) -> bytes:
    raw = b"" if body is None else json.dumps(body).encode()
    lines = [
        b"POST %s HTTP/1.1" % path.encode(),
        b"Host: 127.0.0.1",
        b"Authorization: Bearer " + secret.encode(),
        b"Content-Type: application/json",
        b"Content-Length: %d" % len(raw),
        *extra,
    ]
    if close:
        lines.append(b"Connection: close")
    return b"\r\n".join(lines) + b"\r\n\r\n" + raw


async def _answer(reader: asyncio.StreamReader) -> Raw:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), BOUND)
    length = int(parse(head).headers["content-length"])
    return parse(head + await asyncio.wait_for(reader.readexactly(length), BOUND))


async def _hung_up(reader: asyncio.StreamReader) -> bytes:
    with contextlib.suppress(ConnectionResetError):
        return await asyncio.wait_for(reader.read(), BOUND)
    return b""


async def _handovers(server: Server) -> tuple[float, float]:
    samples = await read_metrics(server)
    return (
        sample(samples, "slotward_front_handovers_total", reason="foreign"),
        sample(samples, "slotward_front_handovers_total", reason="incomplete"),
    )


async def _counted(server: Server, **key: Any) -> tuple[str, tuple[float, float]]:
    """A new agent's key, and the hand-overs so far (read twice: the scrape's own
    connection is handed over at the first read)."""
    agent = await server.key(**key)
    assert agent.secret is not None
    await _handovers(server)
    return agent.secret, await _handovers(server)


def _alike(a: Raw, b: Raw) -> None:
    """The same answer, but for its Date."""
    assert a.status == b.status
    assert {k: v for k, v in a.headers.items() if k != "date"} == {
        k: v for k, v in b.headers.items() if k != "date"
    }
    assert a.body == b.body


async def test_a_replay_is_answered_alike_by_the_front_and_by_the_app(server: Server) -> None:
    secret, before = await _counted(server)
    plain = _create(secret, HOLD_BODY)
    # A cookie beside a key changes nothing (the key is the caller), but the front
    # leaves any request with a cookie to the app.
    with_cookie = _create(secret, HOLD_BODY, b"Cookie: theme=dark")
    reader, writer = await connect(server.base)
    try:
        writer.write(plain)
        fresh = await _answer(reader)
        writer.write(plain)
        by_front = await _answer(reader)
        assert await _handovers(server) == before  # both answered by the front
        writer.write(with_cookie)
        by_app = await _answer(reader)
        writer.write(plain)  # this connection is aiohttp's now
        again = await _answer(reader)
    finally:
        writer.close()
    assert await _handovers(server) == (before[0] + 1, before[1])
    assert fresh.status == 201
    assert fresh.headers["idempotent-replayed"] == "false"
    assert fresh.headers["server"] == "slotward"
    assert by_front.headers["idempotent-replayed"] == "true"
    assert by_front.headers["slotward-hold-status"] == "held"
    assert by_front.body == fresh.body
    _alike(by_front, by_app)
    _alike(by_front, again)
    assert server.sql("SELECT count(*) FROM holds") == [(1,)]


async def test_a_commit_and_a_release_are_answered_alike_by_the_front_and_by_the_app(
    server: Server,
) -> None:
    """Each is answered by the front, then replayed by the front and by the app."""
    secret, before = await _counted(server)
    (reader, writer), (app_reader, app_writer) = [await connect(server.base) for _ in range(2)]

    async def by_front(call: bytes) -> Raw:
        writer.write(call)
        return await _answer(reader)

    async def by_app(call: bytes) -> Raw:
        end = call.index(b"\r\n") + 2
        app_writer.write(call[:end] + b"Cookie: theme=dark\r\n" + call[end:])
        return await _answer(app_reader)

    try:
        hold = (await by_front(_create(secret, HOLD_BODY))).json
        commit = _post(f"/v1/holds/{hold['id']}/commit", secret, {"token": hold["token"]})
        release = _post(f"/v1/holds/{hold['id']}/release", secret, None)
        committed = await by_front(commit)
        pairs = [(await by_front(commit), await by_app(commit))]
        assert await _handovers(server) == (before[0] + 1, before[1])  # the app's connection
        released = await by_front(release)
        pairs.append((await by_front(release), await by_app(release)))
    finally:
        writer.close()
        app_writer.close()
    assert await _handovers(server) == (before[0] + 1, before[1])
    assert (committed.status, committed.json["status"]) == (200, "committed")
    assert (released.status, released.json["status"]) == (200, "released")
    for front_answer, app_answer in pairs:
        assert front_answer.headers["idempotent-replayed"] == "true"
        _alike(front_answer, app_answer)


@pytest.mark.parametrize(
    ("body", "secret"),
    [
        ({**HOLD_BODY, "attendees": "alex@example.com"}, None),  # 422: not a list
        ({**HOLD_BODY, "priority": 99}, None),  # 422: above the key's own
        (HOLD_BODY, "sw_key_0123.not-a-key"),  # 401: an unknown key
    ],
    ids=["invalid-field", "priority-too-high", "unknown-key"],
)
async def test_a_refusal_is_answered_alike_by_the_front_and_by_the_app(
    server: Server, body: dict[str, Any], secret: str | None
) -> None:
    own, before = await _counted(server, priority=50)
    sent_as = secret or own
    reader, writer = await connect(server.base)
    try:
        writer.write(_create(sent_as, body))
        by_front = await _answer(reader)
        assert await _handovers(server) == before
        writer.write(_create(sent_as, body, b"Cookie: theme=dark"))
        by_app = await _answer(reader)
    finally:
        writer.close()
    assert by_front.status in (401, 422)
    assert by_front.headers["content-type"] == "application/problem+json"
    _alike(by_front, by_app)


@pytest.mark.parametrize(
    ("config_overrides", "role", "status"),
    [({}, "reviewer", 403), ({"rate_limit": 0.001, "rate_burst": 1}, "agent", 429)],
    ids=["a reviewer may not create", "one call, then over the rate"],
)
async def test_a_refused_caller_is_named_in_the_access_line_by_the_front_as_by_the_app(
    server: Server, log_stream: io.StringIO, role: Role, status: int
) -> None:
    agent = await server.key(role=role)
    assert agent.secret is not None
    lines = []
    for extra in ((), (b"Cookie: theme=dark",)):  # the front, then the app
        reader, writer = await connect(server.base)
        try:
            writer.write(_create(agent.secret, HOLD_BODY, *extra))
            writer.write(_create(agent.secret, HOLD_BODY, *extra))
            answers = [await _answer(reader) for _ in range(2)]
        finally:
            writer.close()
        assert answers[-1].status == status
        await asyncio.sleep(0)  # the turn's access lines are written at its end
        access = [json.loads(x) for x in log_stream.getvalue().splitlines()
                  if '"slotward.access"' in x]  # fmt: skip
        lines.append({k: v for k, v in access[-1].items() if k not in ("ts", "duration_ms")})
    assert lines[0] == lines[1]
    assert (lines[0]["status"], lines[0]["agent"], lines[0]["tenant"]) == (status, "agent-a",
                                                                           "acme")  # fmt: skip


async def test_pipelined_requests_are_answered_in_order_across_the_hand_over(
    server: Server,
) -> None:
    secret, before = await _counted(server)
    bodies = [{**HOLD_BODY, "workflow_id": f"wf-pipe-{n}", "start": f"2030-10-1{n}T09:00:00Z"}
              for n in range(3)]  # fmt: skip
    creates = [_create(secret, b) for b in bodies]
    reader, writer = await connect(server.base)
    try:
        writer.write(creates[0] + creates[1] + HEALTHZ + creates[2])
        answers = [await _answer(reader) for _ in range(4)]
    finally:
        writer.close()
    assert [a.status for a in answers] == [201, 201, 200, 201]
    assert [a.json["workflow_id"] for a in (answers[0], answers[1], answers[3])] == [
        "wf-pipe-0", "wf-pipe-1", "wf-pipe-2",
    ]  # fmt: skip
    assert await _handovers(server) == (before[0] + 1, before[1])


async def test_a_create_split_across_writes_is_handed_over_and_answered(server: Server) -> None:
    secret, before = await _counted(server)
    whole = _create(secret, HOLD_BODY)
    head_end = whole.index(b"\r\n\r\n") + 4
    reader, writer = await connect(server.base)
    try:
        writer.write(whole[:head_end])
        await writer.drain()
        await asyncio.sleep(0.2)  # the head arrives alone; the front cannot wait for a body
        writer.write(whole[head_end:])
        answer = await _answer(reader)
    finally:
        writer.close()
    assert answer.status == 201
    assert await _handovers(server) == (before[0], before[1] + 1)


@pytest.mark.parametrize("config_overrides", [{"rate_limit": 0}])  # 200 calls of one agent
async def test_however_a_pipelined_stream_is_cut_every_answer_comes_in_order(
    server: Server,
) -> None:
    """Forty seeded cuts of one stream (creates, a replay, a commit, a request for
    aiohttp, then a create after it), each sent in pieces on a new connection:
    wherever a piece ends (in a request line, a header, a body), the answers are
    the same, in order."""
    agent = await server.key()
    assert agent.secret is not None
    bodies = [{**HOLD_BODY, "workflow_id": f"wf-cut-{n}", "start": f"2030-12-0{n + 1}T09:00:00Z"}
              for n in range(2)]  # fmt: skip
    hold = (await agent.create(bodies[0])).json
    commit = _post(f"/v1/holds/{hold['id']}/commit", agent.secret, {"token": hold["token"]})
    stream = (_create(agent.secret, bodies[0]) + commit + _create(agent.secret, bodies[1])
              + HEALTHZ + _create(agent.secret, bodies[1]))  # fmt: skip

    async def sent_in(pieces: list[bytes]) -> list[Raw]:
        reader, writer = await connect(server.base)
        try:
            for piece in pieces:
                writer.write(piece)
                await writer.drain()
                await asyncio.sleep(0)
            return [await _answer(reader) for _ in range(5)]
        finally:
            writer.close()

    await sent_in([stream])  # the commit and the second create answered first here
    whole = await sent_in([stream])  # from now on, every one of them replays
    assert [(a.status, a.headers.get("idempotent-replayed")) for a in whole] == [
        (201, "true"), (200, "true"), (201, "true"), (200, None), (201, "true"),
    ]  # fmt: skip
    rng = random.Random(16)
    for _ in range(40):
        cuts = sorted(rng.sample(range(1, len(stream)), rng.randint(1, 12)))
        pieces = [stream[a:b] for a, b in zip([0, *cuts], [*cuts, len(stream)], strict=True)]
        answers = await sent_in(pieces)
        for got, want in zip(answers, whole, strict=True):
            if want.headers.get("content-type") == "application/json" and b"process" in want.body:
                assert got.status == want.status  # /healthz: says which process, and when
            else:
                _alike(got, want)


async def test_connection_close_is_said_and_done(server: Server) -> None:
    agent = await server.key()
    assert agent.secret is not None
    reader, writer = await connect(server.base)
    try:
        writer.write(_create(agent.secret, HOLD_BODY, close=True))
        answer = await _answer(reader)
        assert await _hung_up(reader) == b""
    finally:
        writer.close()
    assert answer.status == 201
    assert answer.headers["connection"] == "close"


@pytest.mark.parametrize("config_overrides", [{"keepalive_seconds": 0.5}])
async def test_the_front_closes_an_idle_kept_alive_connection(server: Server) -> None:
    agent = await server.key()
    assert agent.secret is not None
    reader, writer = await connect(server.base)
    try:
        for _ in range(2):  # kept alive between answers (a create, then its replay)
            writer.write(_create(agent.secret, HOLD_BODY))
            assert (await _answer(reader)).status == 201
        assert await _hung_up(reader) == b""
    finally:
        writer.close()


@pytest.mark.parametrize(
    "config_overrides", [{"head_timeout_seconds": 0.5, "keepalive_seconds": 60.0}]
)
async def test_a_trickled_head_after_a_front_answer_is_cut_off(server: Server) -> None:
    agent = await server.key()
    assert agent.secret is not None
    reader, writer = await connect(server.base)

    async def trickle() -> None:
        writer.write(b"POST /v1/holds HTTP/1.1\r\n")
        with contextlib.suppress(ConnectionError):
            for n in range(int(BOUND * 10)):
                await asyncio.sleep(0.1)
                writer.write(b"X-Slow-%d: y\r\n" % n)
                await writer.drain()

    try:
        writer.write(_create(agent.secret, HOLD_BODY))
        assert (await _answer(reader)).status == 201
        task = asyncio.create_task(trickle())
        assert await _hung_up(reader) == b""  # well before the 60 s keep-alive
        task.cancel()
    finally:
        writer.close()


async def test_a_stop_lets_the_creates_being_answered_finish(tmp_path: Path) -> None:
    """Creates held at the store's gate when the server is told to stop are
    answered, and written, before it stops."""
    path = tmp_path / "front.db"
    config = Config(db_url=f"sqlite+aiosqlite:///{path}")
    gate = GatedStore(await open_store(config))
    services = await bootstrap(config, store=gate)
    secret = await _agent_key(services)
    stack = contextlib.AsyncExitStack()
    base = await stack.enter_async_context(
        serving(build_app(services, config, sweep=False, relay=False), config)
    )
    gate.gate.clear()
    opened = [await connect(base) for _ in range(8)]
    for n, (_, writer) in enumerate(opened):
        writer.write(_create(secret, {**HOLD_BODY, "workflow_id": f"wf-stop-{n}",
                                      "start": f"2030-11-{n + 1:02d}T09:00:00Z"}))  # fmt: skip
    await until(lambda: gate.held == len(opened))  # every create in flight, at the gate
    stopping = asyncio.create_task(stack.aclose())
    await asyncio.sleep(0.2)
    assert not stopping.done()  # the stop waits for them
    gate.gate.set()
    answers = [await _answer(reader) for reader, _ in opened]
    await asyncio.wait_for(stopping, BOUND)
    for _, writer in opened:
        writer.close()
    assert [a.status for a in answers] == [201] * len(opened)
    with contextlib.closing(sqlite3.connect(path)) as db:
        ids = {row[0] for row in db.execute("SELECT id FROM holds")}
    assert ids == {a.json["id"] for a in answers}


async def _agent_key(services: Services) -> str:
    principal = Principal("t-front", "agent-front", "agent", 50)
    made = await services.store.write(
        lambda uow: create_key(uow, principal, services.clock, services.ids, services.keys.hasher)
    )
    return made.secret
