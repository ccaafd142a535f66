"""Helpers of the provider tests end to end (tests/e2e/test_providers*.py).

A served slotward with its relay, calendar writer and sync worker on the real
clock (in process, or a `slotward serve` process where a SIGKILL or the whole
log output is the point); what is in a real calendar (a Radicale collection,
a memcal directory), read past slotward; an ICS file served over real HTTP;
and a proxy in front of Radicale that forwards every request and can hold the
answers to PUTs back, so writes are in flight when a server is killed.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from icalendar import Calendar
from sqlalchemy import Engine

from slotward.api.bootstrap import Services, bootstrap, open_store
from slotward.api.config import Config
from slotward.api.http.app import build_app
from slotward.api.keys import create_key
from slotward.engine.clock import SystemClock, TimeOrderedIds
from slotward.engine.model import Principal, Role
from tests.e2e.conftest import Answer, Client, serving
from tests.e2e.receiver import eventually
from tests.e2e.test_relay import relay_config
from tests.radicale import RadicaleServer, start_radicale

__all__ = [
    "DAV_USERS",
    "ENV",
    "PATIENT",
    "SECRET_KEY",
    "WITHIN",
    "Calendared",
    "Event",
    "GatedProxy",
    "IcsServer",
    "Process",
    "agent_key",
    "by_uid",
    "calendar_when",
    "calendared",
    "dav_calendar_fixture",
    "dav_fixture",
    "dav_htpasswd_fixture",
    "events_when",
    "eventually",
    "file_events",
    "folder_when",
    "make_keys",
    "over_http",
    "radicale_events",
    "serve_process",
    "uid",
]

SECRET_KEY = "e2e-providers-sealing-key-0123456789"
# Forty attempts, a fifth to two fifths of a second apart: room for a calendar
# that is down for a few seconds before it comes back (no write goes dead).
PATIENT = (0.0, 0.2) + (0.4,) * 38
# What the `slotward serve` processes of these tests run with (as provider_config).
ENV = {
    "SLOTWARD_SECRET_KEY": SECRET_KEY,
    "SLOTWARD_ALLOW_PRIVATE_URLS": "true",  # Radicale and the ICS server are on loopback
    "SLOTWARD_RELAY_SCHEDULE": ",".join(str(d) for d in PATIENT),
    "SLOTWARD_RELAY_TIMEOUT": "1",
    "SLOTWARD_RELAY_INTERVAL": "0.05",
    "SLOTWARD_RATE_LIMIT": "0",
    "SLOTWARD_SWEEP_INTERVAL": "0.2",
    "SLOTWARD_PROVIDER_MAX_STALENESS": "0",  # every decision reads the calendars first
    # Room for a read on a loaded machine (a read that times out is a 503 under
    # fail_closed); a test whose point is a short lease sets less.
    "SLOTWARD_PROVIDER_TIMEOUT": "5",
    "SLOTWARD_PROVIDER_SYNC_INTERVAL": "0.2",
}
_WORKFLOWS = itertools.count(1)
WITHIN = 30.0  # seconds any wait for the writer, the sync worker or the sweeper may take


DAV_USERS = {"alice": "correct-horse-battery-staple-7", "bob": "hunter2-but-longer-9"}


# -- Radicale fixtures (import the functions; the tests name them dav, dav_calendar and
# dav_htpasswd). A test that stops a server starts its own.


@pytest.fixture(scope="session", name="dav")
def dav_fixture() -> Iterator[RadicaleServer]:
    """A Radicale that lets anyone in."""
    with start_radicale() as server:
        yield server


@pytest.fixture(name="dav_calendar")
def dav_calendar_fixture(dav: RadicaleServer) -> str:
    """The URL of a new, empty calendar on :func:`dav_fixture` (trailing slash)."""
    return dav.calendar()


@pytest.fixture(scope="session", name="dav_htpasswd")
def dav_htpasswd_fixture() -> Iterator[RadicaleServer]:
    """A Radicale that checks the passwords of :data:`DAV_USERS`."""
    with start_radicale("htpasswd", DAV_USERS) as server:
        yield server


def provider_config(db_url: str, **overrides: Any) -> Config:
    """The in-process server's settings: the relay tests' (a patient schedule, a
    fast relay), with those of :data:`ENV` for the providers."""
    settings: dict[str, Any] = {
        "secret_key": SECRET_KEY,
        "relay_schedule": PATIENT,
        "sweep_interval_seconds": 0.2,
        # Every decision reads the calendars again: a test changes a calendar and
        # the next claim sees it. Tests of the mirror itself raise it.
        "provider_max_staleness_seconds": 0.0,
        "provider_timeout_seconds": 5.0,  # as ENV's
        "provider_sync_interval_seconds": 0.2,
    }
    return relay_config(db_url, **{**settings, **overrides})


class Recording(Client):
    """A client that keeps every answer's bytes (headers and body): what a caller saw."""

    def __init__(
        self, session: aiohttp.ClientSession, base: str, secret: str | None, seen: list[bytes]
    ) -> None:
        super().__init__(session, base, secret)
        self.seen = seen

    async def request(self, method: str, path: str, body: Any = None, **kw: Any) -> Answer:
        answer = await super().request(method, path, body, **kw)
        self.seen.append(repr(answer.headers).encode() + b"\n" + answer.body)
        return answer


@dataclass
class Calendared:
    """A slotward (in process or not) seen over HTTP: an admin and an agent key."""

    base: str
    session: aiohttp.ClientSession
    admin: Recording
    agent: Recording
    seen: list[bytes] = field(default_factory=list)  # every answer any key got

    def client(self, secret: str) -> Recording:
        return Recording(self.session, self.base, secret, self.seen)

    async def bind(self, attendee: str, body: dict[str, Any]) -> dict[str, Any]:
        """PUT the attendee's calendar; the binding document."""
        put = await self.admin.request("PUT", f"/v1/attendees/{attendee}/calendar", body)
        assert put.status == 200, put.json
        doc: dict[str, Any] = put.json
        return doc

    async def binding(self, attendee: str) -> dict[str, Any]:
        got = await self.admin.get(f"/v1/attendees/{attendee}/calendar")
        assert got.status == 200, got.json
        doc: dict[str, Any] = got.json
        return doc

    async def claim(
        self,
        attendees: str | list[str],
        start: str,
        minutes: int = 30,
        *,
        by: Client | None = None,
        **extra: Any,
    ) -> Answer:
        """POST a hold of ``attendees`` from ``start`` (a new workflow unless given)."""
        body = {
            "workflow_id": f"wf-{next(_WORKFLOWS)}",
            "step": 1,
            "attendees": [attendees] if isinstance(attendees, str) else attendees,
            "start": start,
            "duration_minutes": minutes,
            "title": "Strategy Sync with Alex",
            **extra,
        }
        return await (by or self.agent).create(body)

    async def hold(self, attendees: str | list[str], start: str, **kw: Any) -> dict[str, Any]:
        made = await self.claim(attendees, start, **kw)
        assert made.status == 201, made.json
        doc: dict[str, Any] = made.json
        return doc

    async def settled(self, attendee: str) -> bool:
        """No write of the attendee's calendar pending, none dead."""
        writes = (await self.binding(attendee))["sync"]["writes"]
        assert writes["dead"] == 0, writes
        return bool(writes["pending"] == 0)


def over_http(base: str, session: aiohttp.ClientSession, admin: str, agent: str) -> Calendared:
    """A server (in another process) seen through an admin's and an agent's key."""
    seen: list[bytes] = []
    return Calendared(
        base, session, Recording(session, base, admin, seen), Recording(session, base, agent, seen),
        seen,
    )  # fmt: skip


@dataclass
class InProcess(Calendared):
    services: Services | None = None
    db: Engine | None = None


@contextlib.asynccontextmanager
async def calendared(database: tuple[str, Engine], **overrides: Any) -> AsyncIterator[InProcess]:
    """The production app (relay, writer, sync worker, sweeper) on the real clock."""
    config = provider_config(database[0], **overrides)
    store = await open_store(config)
    services = await bootstrap(config, store=store)
    async with (
        serving(build_app(services, config), config) as base,
        aiohttp.ClientSession() as session,
    ):
        seen: list[bytes] = []
        admin = await _key(services, session, base, "admin", "admin-1", seen)
        agent = await _key(services, session, base, "agent", "agent-1", seen)
        yield InProcess(base, session, admin, agent, seen, services, database[1])


async def _key(
    svc: Services,
    session: aiohttp.ClientSession,
    base: str,
    role: Role,
    name: str,
    seen: list[bytes],
    priority: int = 50,
) -> Recording:
    principal = Principal("acme", name, role, priority)
    made = await svc.store.write(
        lambda uow: create_key(uow, principal, svc.clock, svc.ids, svc.keys.hasher)
    )
    return Recording(session, base, made.secret, seen)


async def agent_key(svc: Services, name: str, priority: int) -> str:
    """A new agent key of the tenant (its secret)."""
    principal = Principal("acme", name, "agent", priority)
    made = await svc.store.write(
        lambda uow: create_key(uow, principal, svc.clock, svc.ids, svc.keys.hasher)
    )
    return made.secret


async def make_keys(db_url: str, *principals: Principal) -> list[str]:
    """Keys made on the database directly, as `slotward keys create` would (for a
    server in another process)."""
    store = await open_store(Config(db_url=db_url))
    clock, ids = SystemClock(), TimeOrderedIds()
    try:
        return [
            (await store.write(partial(create_key, principal=p, clock=clock, ids=ids))).secret
            for p in principals
        ]
    finally:
        await store.close()


# -- a `slotward serve` process ----------------------------------------------------------


@dataclass
class Process:
    proc: subprocess.Popen[bytes]
    base: str
    log: Path

    def kill(self) -> None:
        """SIGKILL: no shutdown, no cleanup, whatever it was doing."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=60)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.asynccontextmanager
async def serve_process(
    db_url: str, log: Path, env: Mapping[str, str] | None = None
) -> AsyncIterator[Process]:
    """`slotward serve` on ``db_url`` with :data:`ENV` (and ``env``), its stdout and
    stderr in ``log``; ended (SIGTERM) when the block ends unless killed before."""
    port = _free_port()
    cli = [sys.executable, "-m", "slotward.api.cli.main"]
    with log.open("ab") as out:  # a file, never a pipe nobody drains
        proc = subprocess.Popen(  # noqa: ASYNC220 - it returns at once; nothing waits
            [*cli, "--db", db_url, "serve", "--port", str(port)],
            stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **ENV, **(env or {})},
        )  # fmt: skip
    served = Process(proc, f"http://127.0.0.1:{port}", log)
    try:
        await _ready(served)
        yield served
    finally:
        served.stop()


async def _ready(served: Process) -> None:
    deadline = time.monotonic() + 60
    async with aiohttp.ClientSession() as session:
        while True:  # readiness, bounded; not a timing assertion
            with contextlib.suppress(aiohttp.ClientError):
                async with session.get(served.base + "/healthz") as resp:
                    if resp.status == 200:
                        return
            if served.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"serve did not start:\n{served.log.read_text()[-3000:]}")
            await asyncio.sleep(0.05)


# -- what is in a calendar, read past slotward ---------------------------------------


@dataclass(frozen=True)
class Event:
    """One VEVENT of a calendar resource."""

    resource: str  # the href (Radicale) or file name (a directory)
    uid: str
    status: str | None
    summary: str
    description: str
    start: datetime
    end: datetime


def parse_events(resource: str, data: bytes) -> list[Event]:
    found = []
    for component in Calendar.from_ical(data).walk("VEVENT"):
        status = component.get("STATUS")
        found.append(
            Event(
                resource=resource,
                uid=str(component.get("UID")),
                status=None if status is None else str(status),
                summary=str(component.get("SUMMARY", "")),
                description=str(component.get("DESCRIPTION", "")),
                start=_utc(component.decoded("DTSTART")),
                end=_utc(component.decoded("DTEND")),
            )
        )
    return found


def _utc(value: Any) -> datetime:
    assert isinstance(value, datetime), value
    assert value.tzinfo is not None, value
    return value.astimezone(UTC)


def _radicale_events(server: RadicaleServer, calendar: str, user: str | None) -> list[Event]:
    found: list[Event] = []
    for href in server.hrefs(calendar, user=user):
        data = server.get(href, user=user)
        if data is not None:  # deleted between the listing and the read
            found += parse_events(href, data)
    return found


async def radicale_events(
    server: RadicaleServer, calendar: str, user: str | None = None
) -> list[Event]:
    """Every event in the Radicale calendar (off the loop: the helpers block)."""
    return await asyncio.to_thread(_radicale_events, server, calendar, user)


def file_events(folder: Path) -> list[Event]:
    """Every event in a memcal directory (its ``*.ics`` files)."""
    found: list[Event] = []
    for path in sorted(folder.glob("*.ics")):
        try:
            data = path.read_bytes()
        except FileNotFoundError:  # deleted since the listing: not there now
            continue
        found += parse_events(path.name, data)
    return found


def uid(hold: dict[str, object]) -> str:
    return f"{hold['id']}@slotward"


async def events_when(
    read: Callable[[], Awaitable[list[Event]]],
    check: Callable[[dict[str, Event]], bool],
    within: float = WITHIN,
) -> dict[str, Event]:
    """The events ``read`` finds, by UID, once ``check`` holds of them; every read
    finds each UID once."""
    deadline = time.monotonic() + within
    while True:
        events = by_uid(await read())
        if check(events):
            return events
        if time.monotonic() > deadline:
            raise AssertionError(f"calendar not as expected within {within} s: {events}")
        await asyncio.sleep(0.05)


async def calendar_when(
    server: RadicaleServer,
    calendar: str,
    check: Callable[[dict[str, Event]], bool],
    *,
    user: str | None = None,
    within: float = WITHIN,
) -> dict[str, Event]:
    """A Radicale calendar's events by UID once ``check`` holds of them."""
    return await events_when(partial(radicale_events, server, calendar, user), check, within)


async def folder_when(
    folder: Path, check: Callable[[dict[str, Event]], bool], within: float = WITHIN
) -> dict[str, Event]:
    """A memcal directory's events by UID once ``check`` holds of them."""
    return await events_when(partial(asyncio.to_thread, file_events, folder), check, within)


def by_uid(events: list[Event]) -> dict[str, Event]:
    """The events by UID, checking each UID is there once."""
    counts = Counter(e.uid for e in events)
    doubled = {name: n for name, n in counts.items() if n > 1}
    assert not doubled, f"events written more than once: {doubled}"
    return {e.uid: e for e in events}


# -- an ICS file served over HTTP -------------------------------------------------------


@dataclass
class IcsServer:
    """A real aiohttp server serving ``body`` as text/calendar at ``/<name>``."""

    body: bytes = b""
    base: str = ""
    gets: int = 0

    def url(self, name: str = "calendar.ics") -> str:
        return f"{self.base}/{name}"

    async def _handle(self, request: web.Request) -> web.Response:
        self.gets += 1
        return web.Response(body=self.body, content_type="text/calendar", charset="utf-8")

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[IcsServer]:
        app = web.Application()
        app.router.add_get("/{name}", self._handle)
        async with serving(app) as base:
            self.base = base
            yield self


# -- a proxy in front of Radicale ----------------------------------------------------------

_HOP = {"host", "content-length", "transfer-encoding", "connection", "keep-alive"}


@dataclass
class GatedProxy:
    """Forwards every request to ``upstream`` (Radicale) and its answer back.

    While :attr:`gate` is closed, the answer to a PUT is held back after
    Radicale has carried it out: the write is done and the writer has not
    heard. :attr:`held` counts the answers held now, :attr:`writes` every PUT
    and DELETE forwarded, by path.
    """

    upstream: str  # Radicale's root, no trailing slash
    base: str = ""
    gate: asyncio.Event = field(default_factory=asyncio.Event)
    held: int = 0
    writes: Counter[str] = field(default_factory=Counter)
    # The first REPORT whose body has these bytes is answered only once
    # ``report_gate`` opens (``report_held`` says it is waiting): a slow read.
    hold_report: bytes | None = None
    report_held: asyncio.Event = field(default_factory=asyncio.Event)
    report_gate: asyncio.Event = field(default_factory=asyncio.Event)
    _client: aiohttp.ClientSession | None = None

    def url(self, calendar: str) -> str:
        """The proxy's URL of a Radicale calendar URL."""
        assert calendar.startswith(self.upstream), calendar
        return self.base + calendar[len(self.upstream) :]

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        assert self._client is not None
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP}
        body = await request.read()
        async with self._client.request(
            request.method, self.upstream + request.path_qs, headers=headers, data=body,
            allow_redirects=False,
        ) as resp:  # fmt: skip
            answer = await resp.read()
            status, out = resp.status, {k: v for k, v in resp.headers.items()
                                        if k.lower() not in _HOP}  # fmt: skip
        if request.method in ("PUT", "DELETE"):
            self.writes[request.path] += 1
        if request.method == "REPORT" and self.hold_report and self.hold_report in body:
            self.hold_report = None  # once
            self.report_held.set()
            await self.report_gate.wait()
        if request.method == "PUT" and not self.gate.is_set():
            self.held += 1
            try:
                await self.gate.wait()
            finally:
                self.held -= 1
        return web.Response(status=status, headers=out, body=answer)

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[GatedProxy]:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        # Bytes as they come (no decompression), no headers of the client's own.
        async with (
            aiohttp.ClientSession(auto_decompress=False, skip_auto_headers=("Accept-Encoding",))
            as self._client,
            serving(app) as base,
        ):  # fmt: skip
            self.base = base
            try:
                yield self
            finally:
                self.gate.set()  # nothing left hanging at the stop
                self.report_gate.set()
