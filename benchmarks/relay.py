"""``slotward bench relay``: the outbox relay's delivery rate and its lag.

One `slotward serve` (its relay inside, as in production) and a local
receiver (a bare aiohttp app in this process that answers 200 and notes when
each event arrived). A webhook subscription sends every ``hold.created`` to
the receiver; C concurrent agents (one key each) create N holds.

Two phases, on one server:

- **lag**: the receiver answers at once while the agents create N holds; each
  event's commit-to-delivery lag is the receiver's arrival time minus the
  moment its create call returned (``relay``'s latencies).
- **drain**: the receiver holds every request (a closed gate) while the agents
  create N more holds, so a backlog of N events builds up; then the gate opens,
  and the relay's rate is N over the time from the opening to the last
  arrival (``relay``'s rate). Measured this way, not while the holds are being
  created, the rate is the relay's own and not the create rate.
- ``bare-client``: the drain's very bodies and headers, posted again to the
  same receiver by a bare aiohttp client at the same concurrency (C, at most
  64: the relay sends up to 64 at once): the ceiling of this machine.

Targets: relay rate / bare client >= 0.5; lag p99 <= 1 s at 64 agents. The
server's CPU per event (its creates included) is read from /proc/<pid>/stat
where there is one. Every create is recorded and the history checked against
the database after the server stopped (benchmarks/recording.py): a violation
fails the run.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from slotward.benchmarks.cpu import per_call_us, tree_cpu_seconds
from slotward.benchmarks.recording import Recorder, check_history
from slotward.benchmarks.results import Outcome, Result, Settings, Target, percentile, ratio
from slotward.benchmarks.servers import (
    make_keys,
    server_env,
    server_pid,
    slotward_server,
    workspace,
)
from slotward.engine.model import Principal

__all__ = ["relay"]

RELAY_FAN_OUT = 64  # deliveries the relay sends at once (docs/relay.md)


@dataclass
class _Receiver:
    """Where the events go: 200 to everything, each arrival noted."""

    arrivals: dict[str, float] = field(default_factory=dict)  # hold id -> first arrival
    requests: list[tuple[bytes, dict[str, str]]] = field(default_factory=list)
    record: bool = True
    count: int = 0
    waiting: set[str] = field(default_factory=set)  # hold ids still expected
    all_in: asyncio.Event = field(default_factory=asyncio.Event)
    gate: asyncio.Event = field(default_factory=asyncio.Event)  # closed: requests wait

    async def handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        await self.gate.wait()
        if self.record:
            self.count += 1
            now = time.time()
            hold_id = str(json.loads(body)["data"]["id"])
            self.arrivals.setdefault(hold_id, now)
            if self.waiting:
                self.waiting.discard(hold_id)
                if not self.waiting:
                    self.all_in.set()
            names = ("webhook-id", "webhook-timestamp", "webhook-signature", "content-type")
            self.requests.append((body, {n: request.headers.get(n, "") for n in names}))
        return web.Response(status=200)


def relay(settings: Settings) -> Outcome:
    outcome = Outcome("relay", settings)
    c, n = settings.concurrency, settings.requests
    agents = [Principal("bench-0", f"agent-{i}", "agent", 50) for i in range(c)]
    admin = Principal("bench-0", "admin", "admin", 50)
    with workspace(settings.db) as databases, _relay_env():
        url = databases.fresh("relay")
        keys = make_keys(url, [admin, *agents])
        recorder = Recorder()
        creators = list(zip(agents, keys[1:], strict=True))
        with slotward_server(url, settings.workers, databases.workdir) as base:
            measured = asyncio.run(_measure(settings, base, keys[0], creators, n, recorder))
        check_history(outcome, url, recorder.calls)
    mine, bare = _results(settings, measured, outcome)
    mine.extra["ratio_to_bare_client"] = ratio(mine.req_per_s, bare.req_per_s)
    outcome.targets += [
        Target("relay events/s / bare aiohttp client", mine.extra["ratio_to_bare_client"],
               0.5, True),
        Target(f"commit-to-delivery lag p99, s, at {c} agents (target at 64)",
               round(mine.p99_ms / 1000, 3), 1.0, False),
    ]  # fmt: skip
    return outcome


@contextlib.contextmanager
def _relay_env() -> Iterator[None]:
    """The server's settings (it inherits this environment): a fresh sealing key, and a
    loopback receiver allowed."""
    wanted = {
        "SLOTWARD_SECRET_KEY": base64.b64encode(os.urandom(24)).decode(),
        "SLOTWARD_ALLOW_PRIVATE_URLS": "true",
    }
    with server_env(wanted):
        yield


async def _measure(
    settings: Settings,
    base: str,
    admin: str,
    agents: Sequence[tuple[Principal, str]],
    n: int,
    recorder: Recorder,
) -> dict[str, Any]:
    receiver = _Receiver()
    app = web.Application()
    app.router.add_post("/hook", receiver.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    target = f"http://127.0.0.1:{runner.addresses[0][1]}/hook"
    connector = aiohttp.TCPConnector(limit=len(agents) + 8)
    try:
        async with aiohttp.ClientSession(connector=connector) as session:
            await _subscribe(session, base, admin, target)
            pid = server_pid(base)
            cpu = _cpu_seconds(pid)
            receiver.gate.set()  # the lag: answered at once
            started = time.perf_counter()
            returned, errors = await _create(session, base, agents, n, settings.seconds, "lag",
                                             recorder)  # fmt: skip
            creating = time.perf_counter() - started
            await _wait_delivered(receiver, returned, settings.seconds)
            lag_arrivals = dict(receiver.arrivals)
            lag_duplicates = receiver.count - len(receiver.requests)
            receiver.gate.clear()  # the drain: a backlog builds up behind the closed gate
            receiver.arrivals, receiver.requests, receiver.all_in = {}, [], asyncio.Event()
            receiver.count = 0
            backlog, more = await _create(session, base, agents, n, settings.seconds, "drain",
                                          recorder)  # fmt: skip
            opened = time.time()
            receiver.gate.set()
            await _wait_delivered(receiver, backlog, settings.seconds)
            server_cpu = _cpu_seconds(pid) - cpu
            receiver.record = False
            bare = await _bare_client(target, receiver.requests, settings.concurrency)
    finally:
        await runner.cleanup()
    return {"receiver": receiver, "returned": returned, "errors": errors + more, "bare": bare,
            "server_cpu": server_cpu, "creating": creating,
            "lag_arrivals": lag_arrivals, "backlog": backlog, "opened": opened,
            "lag_duplicates": lag_duplicates}  # fmt: skip


async def _subscribe(session: aiohttp.ClientSession, base: str, key: str, url: str) -> None:
    body = {"url": url, "topics": ["hold.created"], "description": "bench relay"}
    headers = {"Authorization": f"Bearer {key}"}
    async with session.post(f"{base}/v1/webhooks", json=body, headers=headers) as resp:
        if resp.status != 201:
            raise ValueError(f"the webhook was refused: {resp.status} {await resp.text()}")


async def _create(
    session: aiohttp.ClientSession,
    base: str,
    agents: Sequence[tuple[Principal, str]],
    n: int,
    seconds: float,
    phase: str,
    recorder: Recorder,
) -> tuple[dict[str, float], list[str]]:
    """``n`` creates by the agents side by side, each recorded; when each create
    returned, by hold id."""
    returned: dict[str, float] = {}
    errors: list[str] = []
    todo = iter(range(n))
    deadline = time.monotonic() + seconds

    async def agent(who: Principal, key: str) -> None:
        for i in todo:
            if time.monotonic() > deadline:
                return
            body = {"workflow_id": f"wf-relay-{phase}-{i}", "step": 1,
                    "attendees": [f"room-{phase}-{i}@example.com"],
                    "start": "2031-03-04T10:00:00Z",
                    "duration_minutes": 30, "title": f"relay {i}"}  # fmt: skip
            status, raw, _ = await recorder.post(session, f"{base}/v1/holds", body, who=who,
                                                 secret=key, op="create",
                                                 intent=f"relay-{phase}-{i}")  # fmt: skip
            doc = json.loads(raw) if raw else {}
            if status == 201:
                returned[str(doc["id"])] = time.time()
            elif len(errors) < 5:
                errors.append(f"{status} {doc.get('code')}")

    await asyncio.gather(*(agent(who, k) for who, k in agents))
    return returned, errors


async def _wait_delivered(receiver: _Receiver, returned: dict[str, float], seconds: float) -> None:
    """Until every created hold's event has arrived, or ``seconds`` have passed."""
    receiver.waiting = set(returned) - set(receiver.arrivals)
    if receiver.waiting:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(receiver.all_in.wait(), seconds)


async def _bare_client(
    url: str, requests: Sequence[tuple[bytes, dict[str, str]]], concurrency: int
) -> dict[str, Any]:
    """Post ``requests`` again with a bare aiohttp client, ``concurrency`` at once."""
    width = max(1, min(concurrency, RELAY_FAN_OUT))
    latencies: list[float] = []
    statuses: dict[str, int] = {}
    todo = iter(requests)
    connector = aiohttp.TCPConnector(limit=width)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def worker() -> None:
            for body, headers in todo:
                started = time.perf_counter()
                async with session.post(url, data=body, headers=headers) as resp:
                    await resp.read()
                latencies.append((time.perf_counter() - started) * 1000)
                statuses[str(resp.status)] = statuses.get(str(resp.status), 0) + 1

        cpu, started = time.process_time(), time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(width)))
        took, cpu = time.perf_counter() - started, time.process_time() - cpu
    return {"latencies": sorted(latencies), "statuses": statuses, "seconds": took, "cpu": cpu}


def _cpu_seconds(pid: int | None) -> float:
    return 0.0 if pid is None else tree_cpu_seconds(pid)


def _results(
    settings: Settings, measured: dict[str, Any], outcome: Outcome
) -> tuple[Result, Result]:
    receiver: _Receiver = measured["receiver"]
    returned: dict[str, float] = measured["returned"]
    lagged: dict[str, float] = measured["lag_arrivals"]
    lags = sorted((lagged[h] - returned[h]) * 1000 for h in returned if h in lagged)
    backlog: dict[str, float] = measured["backlog"]
    arrived = {h: receiver.arrivals[h] for h in backlog if h in receiver.arrivals}
    window = max(arrived.values()) - measured["opened"] if arrived else 0.0
    missing = len(returned) - len(lags) + len(backlog) - len(arrived)
    errors = len(measured["errors"]) + missing
    # One answer per event counted; a redelivery (at least once) is counted apart.
    mine = _result("relay", len(arrived), window, lags, errors, settings, {"200": len(arrived)})
    mine.extra["events"] = len(backlog)
    mine.extra["lag_events"] = len(lags)
    # The lag phase's create rate: the load the lag was measured under.
    creating = measured["creating"]
    mine.extra["creates_per_s"] = round(len(returned) / creating, 1) if creating > 0 else 0.0
    mine.extra["lag_p50_ms"], mine.extra["lag_p99_ms"] = mine.p50_ms, mine.p99_ms
    drained_twice = receiver.count - len(receiver.requests)
    mine.extra["duplicates"] = measured["lag_duplicates"] + drained_twice
    # Per event, both phases' events (their creates included).
    mine.server_cpu_us_per_call = per_call_us(measured["server_cpu"], len(arrived) + len(lags))
    mine.client_cpu = 0.0  # the receiver and the agents share this process; see bare-client
    bare = measured["bare"]
    b = _result("bare-client", len(bare["latencies"]), bare["seconds"], bare["latencies"],
                sum(v for k, v in bare["statuses"].items() if k != "200"), settings,
                bare["statuses"])  # fmt: skip
    b.client_cpu = round(bare["cpu"] / bare["seconds"], 2) if bare["seconds"] > 0 else 0.0
    b.concurrency = max(1, min(settings.concurrency, RELAY_FAN_OUT))
    outcome.results += [mine, b]
    if b.errors:
        outcome.problems.append(f"bare-client: {b.errors} posts were not answered 200")
    if measured["errors"]:
        outcome.problems.append("creates failed: " + "; ".join(measured["errors"]))
    if missing:
        outcome.problems.append(f"{missing} events were not delivered in time")
    return mine, b


def _result(
    name: str,
    count: int,
    seconds: float,
    latencies: Sequence[float],
    errors: int,
    settings: Settings,
    statuses: dict[str, int],
) -> Result:
    return Result(
        scenario=name,
        requests=count,
        seconds=round(seconds, 6),
        req_per_s=round(count / seconds, 1) if seconds > 0 else 0.0,
        p50_ms=round(percentile(latencies, 0.50), 2),
        p90_ms=round(percentile(latencies, 0.90), 2),
        p99_ms=round(percentile(latencies, 0.99), 2),
        errors=errors,
        concurrency=settings.concurrency,
        db=settings.db_kind,
        workers=settings.workers,
        client_cpu=0.0,
        statuses=dict(statuses),
    )
