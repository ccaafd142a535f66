"""The crash test's workload: seeded agents, their calls recorded, and the killer.

tests/e2e/test_crash.py runs it and checks what is left.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import aiohttp

from slotward.api.app import open_store
from slotward.api.auth import create_key
from slotward.api.config import Config
from slotward.engine.clock import SystemClock, TimeOrderedIds
from slotward.engine.history import Call, Op
from slotward.engine.model import Principal

CLI = [sys.executable, "-m", "slotward.api.cli"]
ENV = {**os.environ, "SLOTWARD_SWEEP_INTERVAL": "0.2", "SLOTWARD_LOG_LEVEL": "WARNING"}
SEED = 20310506
KILLS = 22
CLIENTS_PER_TENANT = 4
TENANTS = ("crash-a", "crash-b")
PRIORITIES = (10, 50, 90, 50)
ROOMS = tuple(f"room-{i}@example.com" for i in range(3))
LOST_RETRIES = 4  # retries of a call whose answer was lost, each landing once at most
BACK_SECONDS = 30.0  # how long a client waits for a killed server to come back
MAX_LEASE = 2
_DATABASES = itertools.count()


@dataclass(frozen=True)
class Agent:
    tenant: str
    name: str
    secret: str


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """``slotward serve`` on one port, killed and started again at will."""

    def __init__(self, url: str, log: Path) -> None:
        self.url, self.port, self.log = url, _free_port(), log
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        with self.log.open("a") as out:  # a file, never a pipe nobody drains
            self.proc = subprocess.Popen(
                [*CLI, "--db", self.url, "serve", "--port", str(self.port)],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=ENV,
            )
        self.starts += 1
        deadline = time.monotonic() + 30
        while True:  # readiness, bounded; not a timing assertion
            try:
                urllib.request.urlopen(f"{self.base}/healthz", timeout=1).close()
                return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"server did not start:\n{self.log.read_text()}") from None
                time.sleep(0.02)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> int:
        """SIGTERM: a clean shutdown; the exit code."""
        assert self.proc is not None
        self.proc.terminate()
        return self.proc.wait(timeout=60)

    def ensure_stopped(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.kill()


async def _agents(url: str) -> list[Agent]:
    config = Config(db_url=url)
    store = await open_store(config)
    clock, ids, agents = SystemClock(), TimeOrderedIds(), []
    try:
        for tenant in TENANTS:
            for i, priority in enumerate(PRIORITIES):
                principal = Principal(tenant, f"agent-{i}", "agent", priority)
                made = await store.write(
                    partial(create_key, principal=principal, clock=clock, ids=ids,
                            hasher=config.key_hasher())
                )  # fmt: skip
                agents.append(Agent(tenant, principal.agent_id, made.secret))
    finally:
        await store.close()
    return agents


@dataclass
class Recorder:
    """Sends calls and records each attempt as an ``engine.history.Call``."""

    base: str
    session: aiohttp.ClientSession
    calls: list[Call] = field(default_factory=list)

    async def attempt(
        self, agent: Agent, op: Op, path: str, body: dict[str, Any], target: str | None
    ) -> Call | None:
        """One attempt; None when no connection was made (nothing reached the server)."""
        headers = {"Authorization": f"Bearer {agent.secret}"}
        invoked = time.time()
        try:
            async with self.session.post(
                self.base + path, data=json.dumps(body), headers=headers
            ) as resp:
                raw = await resp.read()
                status: int | None = resp.status
                answered = dict(resp.headers)
        except aiohttp.ClientConnectorError:
            return None
        except (aiohttp.ClientError, TimeoutError):
            status, raw, answered = None, b"", {}  # indeterminate: it may have acted
        call = Call(op, agent.tenant, agent.name, body, status, raw, answered, target,
                    None, invoked, time.time())  # fmt: skip
        self.calls.append(call)
        return call

    async def send(
        self,
        agent: Agent,
        op: Op,
        path: str,
        variants: Sequence[dict[str, Any]],
        rng: random.Random,
        target: str | None = None,
    ) -> Call:
        """Until answered: a refused connection waits for the server to come back,
        a lost answer is retried (with any of the ``variants``) up to LOST_RETRIES times."""
        lost, back_by = 0, time.monotonic() + BACK_SECONDS
        body = variants[0]
        while True:
            call = await self.attempt(agent, op, path, body, target)
            if call is None:
                if time.monotonic() > back_by:
                    raise RuntimeError(f"the server did not come back for {op} {path}")
                await asyncio.sleep(0.03)
                continue
            if call.status is not None or lost >= LOST_RETRIES:
                return call
            lost += 1
            body = rng.choice(variants)
            await asyncio.sleep(rng.uniform(0.01, 0.08))


def _hold_variants(rng: random.Random, agent: Agent) -> list[dict[str, Any]]:
    """A create and the same intent reworded (title, offset, attendee spelling)."""
    room = rng.choice(ROOMS)
    minutes = rng.choice([0, 15, 30, 45, 60])
    hour, minute = 9 + minutes // 60, minutes % 60
    shared = rng.random() < 0.15  # another agent of the tenant in the same workflow
    workflow = f"wf-shared-{rng.randrange(2)}" if shared else f"wf-{agent.name}-{rng.randrange(3)}"
    call: dict[str, Any] = {
        "workflow_id": workflow,
        "step": rng.choice([1, 2]),
        "attendees": [room],
        "start": f"2031-05-06T{hour:02d}:{minute:02d}:00Z",
        "duration_minutes": 30,
        "title": f"sync {rng.randrange(1000)}",
    }
    if rng.random() < 0.2:
        call["hold_ttl_seconds"] = 10
    reworded = {
        **call,
        "attendees": [f"  {room.upper()} "],
        "start": f"2031-05-06T{hour + 2:02d}:{minute:02d}:00+02:00",
        "title": f"{call['title']} (retry)",
        "agent_thought": "the first call timed out",
    }
    return [call, reworded] if rng.random() < 0.5 else [reworded, call]


def _execution(n: int, lease: int) -> dict[str, Any]:
    return {"workflow_id": f"wf-exec-{n}", "tool": "send_email", "arguments": {"n": n},
            "lease_seconds": lease}  # fmt: skip


async def _client(rec: Recorder, agent: Agent, rng: random.Random, stop: asyncio.Event) -> None:
    holds: list[dict[str, Any]] = []
    while not stop.is_set():
        roll = rng.random()
        if roll < 0.4 or not holds:
            await _create(rec, agent, rng, holds)
        elif roll < 0.55:
            await _commit(rec, agent, rng, holds)
        elif roll < 0.65:
            await _release(rec, agent, rng, holds)
        else:
            await _run_execution(rec, agent, rng)


async def _create(
    rec: Recorder, agent: Agent, rng: random.Random, holds: list[dict[str, Any]]
) -> None:
    variants = _hold_variants(rng, agent)
    for _ in range(rng.choice([1, 1, 2])):  # sometimes a duplicate right away
        call = await rec.send(agent, "create", "/v1/holds", variants, rng)
        doc = call.document()
        if call.status == 201 and doc.get("agent_id") == agent.name:
            holds.append(doc)


async def _commit(
    rec: Recorder, agent: Agent, rng: random.Random, holds: list[dict[str, Any]]
) -> None:
    hold = rng.choice(holds)
    path = f"/v1/holds/{hold['id']}/commit"
    for _ in range(rng.choice([1, 1, 2])):
        await rec.send(agent, "commit", path, [{"token": hold["token"]}], rng, hold["id"])


async def _release(
    rec: Recorder, agent: Agent, rng: random.Random, holds: list[dict[str, Any]]
) -> None:
    hold = holds.pop(rng.randrange(len(holds)))
    path = f"/v1/holds/{hold['id']}/release"
    for _ in range(rng.choice([1, 1, 2])):
        await rec.send(agent, "release", path, [{}], rng, hold["id"])


async def _run_execution(rec: Recorder, agent: Agent, rng: random.Random) -> None:
    n = rng.randrange(30)
    body = _execution(n, rng.randint(1, MAX_LEASE))
    waiting = {**body, "wait_ms": 2500}  # a retry waits out the lease its lost call may hold
    call = await rec.send(agent, "acquire", "/v1/executions", [body, waiting], rng)
    if call.status != 201 or rng.random() < 0.15:  # not ours, or abandoned: its lease runs out
        return
    lease = call.document()
    outcome = rng.choice(["succeeded", "succeeded", "failed_terminal", "failed_retryable"])
    done = {"lease_token": lease["lease_token"], "outcome": outcome,
            "result": {"n": n, "by": f"{agent.tenant}/{agent.name}"}}  # fmt: skip
    path = f"/v1/executions/{lease['key']}/complete"
    await rec.send(agent, "complete", path, [done], rng, lease["key"])


async def _killer(server: Server, rec: Recorder, agent: Agent, rng: random.Random) -> int:
    """An abandoned lease first (it must outlive every crash), then KILLS crashes."""
    orphan = await rec.send(agent, "acquire", "/v1/executions", [_execution(-1, 1)], rng)
    assert orphan.status == 201, orphan
    kills = 0
    for _ in range(KILLS):
        await asyncio.sleep(rng.uniform(0.05, 0.4))
        await asyncio.to_thread(server.kill)
        kills += 1
        await asyncio.sleep(rng.uniform(0.0, 0.1))  # clients meet a refused port too
        await asyncio.to_thread(server.start)
    return kills


async def _workload(server: Server, agents: list[Agent]) -> tuple[list[Call], int]:
    rng = random.Random(SEED)
    stop = asyncio.Event()
    connector = aiohttp.TCPConnector(force_close=True, limit=0)
    timeout = aiohttp.ClientTimeout(total=20)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        rec = Recorder(server.base, session)
        clients = [
            asyncio.create_task(_client(rec, a, random.Random(rng.random()), stop)) for a in agents
        ]
        try:
            kills = await _killer(server, rec, agents[0], random.Random(rng.random()))
        finally:
            stop.set()
            await asyncio.gather(*clients)
    return rec.calls, kills
