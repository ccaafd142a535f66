"""The client's retries over real HTTP: lost answers, 429, request_in_progress, no answer.

The server is the production app on a real SQLite file with a clock the test
moves; the client's ``sleep`` hook is where time is skipped (it advances that
clock, or opens a gate), so a Retry-After is honoured without the test sleeping
and the wait the client chose is what is asserted. A small TCP proxy between
the two loses answers the server did send, after it acted.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import pytest

from slotward.api.client import RetryEvent, Slotward, SlotwardError, Unreachable
from slotward.engine.ports import Store
from tests.e2e.conftest import Server, until
from tests.e2e.test_inflight import GatedStore

# The retries are the client's; one store shows them (the stores have their own suites).
SQLITE = pytest.mark.parametrize("database", ["sqlite"], indirect=True)

ARGS: dict[str, Any] = {
    "workflow_id": "wf-7",
    "step": 1,
    "attendees": ["alex@example.com"],
    "start": "2030-10-14T14:00:00Z",
    "duration_minutes": 30,
    "title": "Sync",
}


class Proxy:
    """A TCP proxy that forwards requests, and loses the first ``drop`` answers.

    A lost answer is read from the server (so the server has acted and
    answered) and then the client's connection is closed instead of passing
    it on. ``blackhole`` forwards nothing and never answers.
    """

    def __init__(self, upstream_port: int, *, drop: int = 0, blackhole: bool = False) -> None:
        self.upstream_port, self.drop, self.blackhole = upstream_port, drop, blackhole
        self.connections = 0
        self.lost = 0
        self.sent: list[bytearray] = []  # what each connection's client sent

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[str]:
        server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            server.close()
            await server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            if self.blackhole:
                await reader.read()  # until the client gives up
                return
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
            self.sent.append(sent := bytearray())
            pump = asyncio.ensure_future(_pump(reader, up_writer, close=True, into=sent))
            try:
                if self.lost < self.drop:
                    await up_reader.read(1)  # the answer has begun: the server acted
                    self.lost += 1
                    return
                await _pump(up_reader, writer)
            finally:
                pump.cancel()
                up_writer.close()
        finally:
            writer.close()


async def _pump(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    *,
    close: bool = False,
    into: bytearray | None = None,
) -> None:
    while chunk := await reader.read(65536):
        if into is not None:
            into += chunk
        writer.write(chunk)
        await writer.drain()
    if close:  # the client hung up: so does the proxy, and the server sees it
        writer.close()


def _skip(server: Server, seconds: float) -> None:
    """Time passes for the server (its rate limiter refills), not for the test."""
    server.clock.advance(seconds)


def _port(base: str) -> int:
    return int(base.rsplit(":", 1)[1])


@contextlib.asynccontextmanager
async def fresh_connections() -> AsyncIterator[aiohttp.ClientSession]:
    """A session that opens a connection per request: the proxy counts attempts."""
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(force_close=True)) as s:
        yield s


class Waits:
    """The client's ``sleep`` and ``on_retry`` hooks: records, then runs ``then``."""

    def __init__(self, then: Callable[[float], Awaitable[None] | None] | None = None) -> None:
        self.delays: list[float] = []
        self.events: list[RetryEvent] = []
        self._then = then

    async def sleep(self, seconds: float) -> None:
        self.delays.append(seconds)
        if self._then is not None and (pending := self._then(seconds)) is not None:
            await pending

    def hooks(self) -> dict[str, Any]:
        return {"sleep": self.sleep, "on_retry": self.events.append}


@SQLITE
async def test_a_lost_answer_is_retried_and_replays_the_one_hold(server: Server) -> None:
    secret = (await server.key()).secret
    assert secret is not None
    proxy, waits = Proxy(_port(server.base), drop=2), Waits()
    async with (
        proxy.running() as base,
        fresh_connections() as session,
        Slotward(base, secret, session=session, **waits.hooks()) as sw,
    ):
        hold = await sw.create_hold(**ARGS)
    assert (proxy.lost, proxy.connections) == (2, 3)
    bodies = {bytes(sent).partition(b"\r\n\r\n")[2] for sent in proxy.sent}
    assert len(bodies) == 1  # every attempt sent the very same bytes
    assert json.loads(bodies.pop())["workflow_id"] == ARGS["workflow_id"]
    assert [(e.retry, e.status, e.reason) for e in waits.events] == [
        (1, 0, "connection_error"),
        (2, 0, "connection_error"),
    ]
    assert hold.replayed  # the server's first answer, which never reached us
    assert hold.status == "held"
    assert server.sql("SELECT id FROM holds") == [(hold.id,)]


@SQLITE
@pytest.mark.parametrize("config_overrides", [{"rate_limit": 1.0, "rate_burst": 1}])
async def test_a_429_waits_its_retry_after_then_lands(
    server: Server, config_overrides: dict[str, Any]
) -> None:
    secret = (await server.key()).secret
    assert secret is not None
    waits = Waits(lambda seconds: _skip(server, seconds))
    async with Slotward(server.base, secret, **waits.hooks()) as sw:
        await sw.find_free_slots(
            ARGS["attendees"], "2030-10-14T09:00:00Z", "2030-10-14T17:00:00Z", 30
        )
        hold = await sw.create_hold(**ARGS)  # the bucket is empty: 429, Retry-After: 1
    assert [(e.status, e.reason) for e in waits.events] == [(429, "rate_limited")]
    assert 1.0 <= waits.delays[0] <= 1.1  # never sooner than told, a little jitter
    assert not hold.replayed
    assert server.sql("SELECT count(*) FROM holds") == [(1,)]


@SQLITE
@pytest.mark.parametrize("config_overrides", [{"rate_limit": 0.01, "rate_burst": 1}])
async def test_a_long_retry_after_is_capped_and_retries_run_out(
    server: Server, config_overrides: dict[str, Any]
) -> None:
    secret = (await server.key()).secret
    assert secret is not None
    waits = Waits(lambda seconds: _skip(server, seconds))
    async with Slotward(server.base, secret, retries=2, **waits.hooks()) as sw:
        await sw.find_free_slots(
            ARGS["attendees"], "2030-10-14T09:00:00Z", "2030-10-14T17:00:00Z", 30
        )
        with pytest.raises(SlotwardError) as refused:
            await sw.create_hold(**ARGS)  # Retry-After: 100, then 40
    assert waits.delays == [30.0, 30.0]  # cut to 30 s each, two retries and no more
    assert (refused.value.status, refused.value.code) == (429, "rate_limited")
    assert (refused.value.retry_after or 0) > 30  # the last Retry-After, uncut
    assert server.sql("SELECT count(*) FROM holds") == [(0,)]


GATED: dict[str, GatedStore] = {}


@pytest.fixture
def store_wrapper() -> Callable[[Store], Store]:
    """The real store behind a gate (open unless a test closes it)."""

    def wrap(store: Store) -> Store:
        gated = GATED["store"] = GatedStore(store)
        return gated

    GATED.clear()
    return wrap


@SQLITE
@pytest.mark.parametrize("config_overrides", [{"inflight_wait_ms": 0}])
async def test_request_in_progress_is_retried_until_the_first_answer_replays(
    server: Server, config_overrides: dict[str, Any]
) -> None:
    gated = GATED["store"]
    raw = await server.key()
    assert raw.secret is not None
    gated.gate.clear()
    first = asyncio.ensure_future(raw.create(ARGS))  # held at the store's gate
    await until(lambda: gated.held == 1)

    async def open_gate(seconds: float) -> None:
        gated.gate.set()
        await first

    waits = Waits(open_gate)
    async with Slotward(server.base, raw.secret, **waits.hooks()) as sw:
        hold = await sw.create_hold(**{**ARGS, "title": "Sync, reworded"})
    assert [(e.status, e.reason) for e in waits.events] == [(409, "request_in_progress")]
    assert waits.delays[0] >= 1.0  # the 409's Retry-After: 1
    answer = await first
    assert answer.status == 201
    assert (hold.replayed, hold.id) == (True, answer.json["id"])
    assert server.sql("SELECT count(*) FROM holds") == [(1,)]


@SQLITE
async def test_a_422_is_never_retried(server: Server) -> None:
    secret = (await server.key()).secret
    assert secret is not None
    proxy, waits = Proxy(_port(server.base)), Waits()
    async with (
        proxy.running() as base,
        fresh_connections() as session,
        Slotward(base, secret, session=session, **waits.hooks()) as sw,
    ):
        with pytest.raises(SlotwardError) as refused:
            await sw.create_hold(**{**ARGS, "duration_minutes": 0})
    assert (refused.value.status, refused.value.code) == (422, "invalid_field")
    assert proxy.connections == 1
    assert waits.delays == []


async def test_no_server_is_unreachable_after_the_retries() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens once it is closed
    waits = Waits()
    async with Slotward(f"http://127.0.0.1:{port}", "sw_x", retries=2, **waits.hooks()) as sw:
        with pytest.raises(Unreachable) as gone:
            await sw.get_hold("hold_1")
    assert (gone.value.status, gone.value.code, gone.value.retryable) == (
        0,
        "connection_error",
        True,
    )
    assert [e.reason for e in waits.events] == ["connection_error"] * 2
    assert "after 3 attempts" in gone.value.detail


@SQLITE
async def test_a_silent_server_times_out_each_attempt_then_the_deadline_ends_the_call(
    server: Server,
) -> None:
    proxy, waits = Proxy(_port(server.base), blackhole=True), Waits()
    async with proxy.running() as base, fresh_connections() as session:
        async with Slotward(
            base, "sw_x", session=session, timeout=0.2, retries=1, **waits.hooks()
        ) as sw:
            with pytest.raises(Unreachable) as silent:
                await sw.get_hold("hold_1")
        assert silent.value.code == "timeout"
        assert proxy.connections == 2
        async with Slotward(base, "sw_x", session=session, timeout=30, deadline=0.2) as sw:
            with pytest.raises(Unreachable) as late:
                await sw.get_hold("hold_1")
        assert late.value.code == "deadline_exceeded"


async def test_a_2xx_whose_body_is_not_json_is_an_error_not_an_empty_hold() -> None:
    async def mangled(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 201 Created\r\nContent-Length: 6\r\n\r\n<html>")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(mangled, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        async with Slotward(f"http://127.0.0.1:{port}", "sw_x") as sw:
            with pytest.raises(SlotwardError) as odd:
                await sw.create_hold(**ARGS)
    finally:
        server.close()
        await server.wait_closed()
    assert (odd.value.status, odd.value.code) == (201, "invalid_answer")


@SQLITE
@pytest.mark.parametrize("config_overrides", [{"max_connections": 1}])
async def test_a_503_past_the_connection_cap_is_retried_once_a_connection_frees(
    server: Server, config_overrides: dict[str, Any]
) -> None:
    secret = (await server.key()).secret
    assert secret is not None
    held_reader, held = await asyncio.open_connection("127.0.0.1", _port(server.base))
    held.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")  # served: the one connection is taken
    await held.drain()
    assert (await held_reader.readline()).startswith(b"HTTP/1.1 200")

    async def free_it(seconds: float) -> None:
        if not held.is_closing():
            held.close()
            await held.wait_closed()

    waits = Waits(free_it)
    async with Slotward(server.base, secret, **waits.hooks()) as sw:
        hold = await sw.create_hold(**ARGS)
    # The server may see the close a moment after the retry: more 503s, never another answer.
    assert {(e.status, e.reason) for e in waits.events} == {(503, "too_many_connections")}
    assert all(d >= 1.0 for d in waits.delays)  # its Retry-After: 1
    assert (hold.status, hold.replayed) == ("held", False)
