"""Relays in separate `slotward serve` processes: killed mid-batch, side by side.

Each server is a real subprocess on a real SQLite file or PostgreSQL database,
its relay on the real clock with a one-second timeout, so its claim lease (and
the SQLite relay lease) is eleven seconds. The receiver runs in the test
(tests/e2e/receiver.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from slotward.api.bootstrap import open_store
from slotward.api.client import Slotward
from slotward.api.config import Config
from slotward.api.keys import create_key
from slotward.engine.clock import SystemClock, TimeOrderedIds
from slotward.engine.model import Principal
from tests.conftest import TEMPLATE
from tests.e2e.conftest import HOLD_BODY
from tests.e2e.receiver import Hang, Receiver, Reply, eventually, wait_until
from tests.e2e.test_metrics import parse_metrics
from tests.e2e.test_relay import SECRET_KEY, check_bodies, check_order
from tests.pgserver import PgServer

CLI = [sys.executable, "-m", "slotward.api.cli.main"]
LEASE = 11.0  # SLOTWARD_RELAY_TIMEOUT (1 s) + 10 s
_DATABASES = itertools.count()
ENV = {
    "SLOTWARD_SECRET_KEY": SECRET_KEY,
    "SLOTWARD_ALLOW_PRIVATE_URLS": "true",
    "SLOTWARD_RELAY_SCHEDULE": ",".join(["0", "0.2"] + ["0.4"] * 38),
    "SLOTWARD_RELAY_TIMEOUT": "1",
    "SLOTWARD_RELAY_INTERVAL": "0.05",
    "SLOTWARD_RATE_LIMIT": "0",
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request: pytest.FixtureRequest) -> str:
    """A fresh, migrated database: a SQLite file or a PostgreSQL database."""
    url: str = request.getfixturevalue(f"{request.param}_url")
    return url


@pytest.fixture
def postgres_url(postgres: PgServer) -> str:
    return postgres.create_database(f"relay_processes_{next(_DATABASES)}", template=TEMPLATE)


@pytest.fixture
def sqlite_url(sqlite_template: Path, tmp_path: Path) -> str:
    path = tmp_path / "slotward.db"
    shutil.copyfile(sqlite_template, path)
    return f"sqlite+aiosqlite:///{path}"


@dataclass
class Served:
    """One `slotward serve` process."""

    proc: subprocess.Popen[bytes]
    base: str
    log: Path

    def kill(self) -> None:
        """SIGKILL: no shutdown, no cleanup, whatever it was doing."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)


@dataclass
class Cluster:
    """The servers of one test on one database, and an admin and an agent key."""

    url: str
    tmp: Path
    session: aiohttp.ClientSession
    admin: str = ""
    agent: str = ""
    servers: list[Served] = field(default_factory=list)

    async def start(self) -> Served:
        port = _free_port()
        log = self.tmp / f"serve-{port}.log"
        with log.open("wb") as out:  # a file, never a pipe nobody drains
            proc = subprocess.Popen(  # noqa: ASYNC220 - it returns at once; nothing waits
                [*CLI, "--db", self.url, "serve", "--port", str(port)],
                stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **ENV},
            )  # fmt: skip
        served = Served(proc, f"http://127.0.0.1:{port}", log)
        self.servers.append(served)
        await self._ready(served)
        return served

    async def _ready(self, served: Served) -> None:
        deadline = time.monotonic() + 60
        while True:  # readiness, bounded; not a timing assertion
            with contextlib.suppress(aiohttp.ClientError):
                async with self.session.get(served.base + "/healthz") as resp:
                    if resp.status == 200:
                        return
            if served.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"serve did not start:\n{served.log.read_text()[-3000:]}")
            await asyncio.sleep(0.05)

    async def call(
        self, served: Served, method: str, path: str, body: Any = None, *, admin: bool = False
    ) -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {self.admin if admin else self.agent}"}
        async with self.session.request(method, served.base + path, json=body,
                                        headers=headers) as resp:  # fmt: skip
            return resp.status, await resp.json(content_type=None)

    async def subscribe(self, served: Served, receiver: Receiver) -> None:
        status, doc = await self.call(
            served, "POST", "/v1/webhooks", {"url": receiver.url, "topics": ["hold.*"]}, admin=True
        )
        assert status == 201, doc
        receiver.secrets.append(doc["secret"])

    def agent_of(self, served: Served) -> Slotward:
        """The agent's client of ``served``; no retries, so a refusal fails the test."""
        return Slotward(served.base, self.agent, session=self.session, retries=0)

    async def hold(self, served: Served, name: str, *, commit: bool = False) -> str:
        body = {**HOLD_BODY, "workflow_id": f"wf-{name}", "attendees": [f"{name}@example.com"]}
        sw = self.agent_of(served)
        hold = await sw.create_hold(**body)
        assert (hold.status, hold.replayed) == ("held", False)
        if commit:
            assert hold.token is not None
            assert (await sw.commit_hold(hold.id, hold.token)).status == "committed"
        return hold.id

    async def events(self, served: Served, state: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        cursor = ""
        while True:  # page by page (at most 100 a page)
            path = f"/v1/outbox?state={state}&limit=100{cursor}"
            status, doc = await self.call(served, "GET", path, admin=True)
            assert status == 200, doc
            items += doc["items"]
            if not doc["next_cursor"]:
                return items
            cursor = f"&cursor={doc['next_cursor']}"

    async def settled(self, served: Served) -> bool:
        return not await self.events(served, "pending")

    async def lease_held(self, served: Served) -> float:
        async with self.session.get(served.base + "/metrics") as resp:
            samples = parse_metrics(await resp.text())
        return samples[("slotward_relay_lease_held", frozenset())]

    async def delivered_by(self, served: Served) -> float:
        """The deliveries this process's relay recorded as delivered (its own counter)."""
        async with self.session.get(served.base + "/metrics") as resp:
            samples = parse_metrics(await resp.text())
        key = ("slotward_webhook_deliveries_total", frozenset({("outcome", "delivered")}))
        return samples[key]


@contextlib.asynccontextmanager
async def cluster(url: str, tmp: Path) -> AsyncIterator[Cluster]:
    admin, agent = await _keys(url)
    async with aiohttp.ClientSession() as session:
        made = Cluster(url, tmp, session, admin, agent)
        try:
            yield made
        finally:
            for served in made.servers:
                if served.proc.poll() is None:
                    served.proc.terminate()
                    served.proc.wait(timeout=60)


async def _keys(url: str) -> tuple[str, str]:
    store = await open_store(Config(db_url=url))
    clock, ids = SystemClock(), TimeOrderedIds()
    admin = Principal("acme", "admin-1", "admin", 50)
    agent = Principal("acme", "agent-1", "agent", 50)
    try:
        made = [
            await store.write(partial(create_key, principal=p, clock=clock, ids=ids))
            for p in (admin, agent)
        ]
    finally:
        await store.close()
    return made[0].secret, made[1].secret


async def test_a_relay_killed_mid_batch_loses_nothing(db_url: str, tmp_path: Path) -> None:
    async with Receiver() as receiver, cluster(db_url, tmp_path) as c:
        first = await c.start()
        await c.subscribe(first, receiver)
        receiver.gate_all()  # every request hangs: deliveries stay in flight
        holds = [await c.hold(first, f"room-{i}", commit=True) for i in range(5)]
        await wait_until(lambda: receiver.in_flight >= 1, 30, lambda: "nothing was sent")
        first.kill()  # mid-batch: it sent, it never heard back, it recorded nothing
        killed_at = time.time()
        cut_off = receiver.in_flight
        receiver.release_all()
        second = await c.start()
        await eventually(partial(c.settled, second), LEASE + 60, lambda: "events still pending")
        events = await c.events(second, "delivered")
        assert await c.events(second, "dead") == []
        assert len(events) == 2 * len(holds)  # each hold created, then committed
        ids = {e["id"] for e in events}
        assert receiver.delivered_ids() == ids  # count distinct webhook-ids: every event
        assert cut_off >= 1
        hooks = receiver.hooks()
        assert all(a.verified_by == tuple(receiver.secrets) for a in hooks)
        check_bodies(hooks, events)
        check_order([a for a in hooks if a.at > killed_at])  # the second relay's, in order
        resent = [i for i in ids if len(receiver.of(i)) >= 2]
        assert len(resent) >= 1  # what was in flight at the kill went out again, same id


async def test_two_processes_on_postgresql_deliver_every_event_in_order(
    postgres_url: str, tmp_path: Path
) -> None:
    holds = 30
    async with Receiver(default=Hang(0.01)) as receiver, cluster(postgres_url, tmp_path) as c:
        a, b = await c.start(), await c.start()
        await c.subscribe(a, receiver)

        async def life(i: int) -> None:
            served = (a, b)[i % 2]
            hold_id = await c.hold(served, f"room-{i}", commit=True)
            released = await c.agent_of((b, a)[i % 2]).release_hold(hold_id)
            assert released.status == "released"

        await asyncio.gather(*(life(i) for i in range(holds)))
        await eventually(partial(c.settled, a), 60, lambda: f"{len(receiver.delivered_ids())}")
        events = await c.events(b, "delivered")
        assert len(events) == 3 * holds
        assert receiver.delivered_ids() == {e["id"] for e in events}
        # Never claimed by both relays at once (SKIP LOCKED): each send to the
        # receiver is one logged attempt, and only the last of an event's succeeded.
        for event in events:
            [delivery] = event["deliveries"]
            statuses = [a["status"] for a in delivery["log"]]
            assert statuses[-1] == 200, (event["id"], statuses)
            assert 200 not in statuses[:-1], (event["id"], statuses)
            assert len(receiver.of(event["id"])) == len(statuses), (event["id"], statuses)
        # Side by side: the two relays' counts add up to every event (which of
        # them sent how many is up to their timing; tests/integration/
        # test_pg_relay_claims.py proves their claims disjoint).
        assert await c.delivered_by(a) + await c.delivered_by(b) == len(events)
        hooks = receiver.hooks()
        assert all(h.verified_by == tuple(receiver.secrets) for h in hooks)
        check_bodies(hooks, events)
        check_order(hooks)


async def test_two_processes_on_one_sqlite_file_run_one_relay_at_a_time(
    sqlite_url: str, tmp_path: Path
) -> None:
    async with Receiver(default=Reply(200)) as receiver, cluster(sqlite_url, tmp_path) as c:
        a, b = await c.start(), await c.start()
        both = (a, b)
        seen: list[tuple[float, float, float]] = []  # (time, a's gauge, b's gauge)
        alive = list(both)
        # A round of samples and the kill exclude each other: a round that saw
        # a process alive must not have its request cut by the kill (a refused
        # connection is not a gauge of 0, and would fail the test at random).
        sampling = asyncio.Lock()

        async def sample() -> None:
            while True:
                async with sampling:
                    gauges = []
                    for served in both:
                        held = await c.lease_held(served) if served in alive else 0.0
                        gauges.append(held)
                seen.append((time.time(), gauges[0], gauges[1]))
                await asyncio.sleep(0.05)

        sampler = asyncio.create_task(sample())
        try:
            await wait_until(lambda: any(s[1] or s[2] for s in seen), 30, lambda: "no holder")
            await c.subscribe(a, receiver)
            for i in range(6):
                await c.hold(both[i % 2], f"room-{i}", commit=True)
            await eventually(partial(c.settled, a), 30)
            held = {(s[1], s[2]) for s in seen if s[1] or s[2]}
            assert held in ({(1.0, 0.0)}, {(0.0, 1.0)}), "the lease moved while both were alive"
            holder, other = (a, b) if held == {(1.0, 0.0)} else (b, a)

            receiver.gate_all()
            for i in range(6, 10):
                await c.hold(other, f"room-{i}", commit=True)
            await wait_until(lambda: receiver.in_flight >= 1, 30)
            async with sampling:
                alive.remove(holder)
                holder.kill()
            receiver.release_all()

            async def taken_over() -> bool:
                return await c.lease_held(other) == 1

            # Within the lease and a margin of the kill, or the wait fails the test.
            await eventually(taken_over, LEASE + 10, lambda: "the survivor never took the lease")
            await eventually(partial(c.settled, other), 60)
        finally:
            sampler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sampler
        assert not [s for s in seen if s[1] == 1 and s[2] == 1], "both held the relay lease"
        events = await c.events(other, "delivered")
        assert len(events) == 2 * 10
        assert receiver.delivered_ids() == {e["id"] for e in events}
        check_bodies(receiver.hooks(), events)
