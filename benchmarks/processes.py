"""Holds per second with 1, 2 and 4 server processes on one PostgreSQL.

    .venv/bin/python -m benchmarks.processes [--requests 3000] [--json out.json]

Starts a throwaway PostgreSQL (tests/pgserver.py), then for each process count
serves ``slotward serve --workers N`` on a fresh database and drives it from
this process with fresh creates (distinct attendees, so no conflicts) at 64
concurrent connections, once with every agent in one tenant and once spread
over 16 tenants. Reports req/s, p50 and p99, and each rate as a ratio to one
process in the same run: these machines are shared and noisy, so only ratios
measured together mean anything. Loopback only; bounded in requests.

Every call is recorded (a tuple, while the clock runs; the history is built
after it stops) and checked against the database afterwards by the history
checker (``slotward.engine.history``): the warm-up's 200 creates come back as
replays in the measured run, under the same intent label. Any violation is
printed, and the run exits with status 1.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import asdict, dataclass
from datetime import UTC, datetime, timedelta
from functools import partial
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from slotward.adapters.store.postgres import PostgresStore  # noqa: E402
from slotward.adapters.store.snapshot import load_snapshot  # noqa: E402
from slotward.api.auth import create_key  # noqa: E402
from slotward.engine.clock import SystemClock, TimeOrderedIds  # noqa: E402
from slotward.engine.history import Call, Violation, check  # noqa: E402
from slotward.engine.model import Principal  # noqa: E402
from tests.pgserver import start_postgres  # noqa: E402

CONCURRENCY = 64


@dataclass
class Result:
    scenario: str
    processes: int
    tenants: int
    requests: int
    seconds: float
    req_per_s: float
    p50_ms: float
    p99_ms: float
    ratio_to_one_process: float = 1.0
    calls_checked: int = 0
    violations: int = 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def _keys(url: str, tenants: int) -> list[str]:
    store = await PostgresStore.open(url, timedelta(hours=24))
    clock, ids = SystemClock(), TimeOrderedIds()
    try:
        out = []
        for i in range(tenants):
            principal = Principal(f"tenant-{i}", "bench", "agent", 50)
            made = await store.write(partial(create_key, principal=principal, clock=clock, ids=ids))
            out.append(made.secret)
        return out
    finally:
        await store.close()


# What a call's answer is recorded as while the clock runs: its index, status, body,
# Idempotency-Key, Idempotent-Replayed, and its start and end in seconds since the
# epoch (as ``Call`` has them), read off perf_counter for their precision.
Answer = tuple[int, dict[str, Any], int, bytes, str | None, str | None, float, float]


async def _drive(
    base: str, keys: list[str], requests: int, answers: list[Answer]
) -> tuple[float, list[float]]:
    latencies: list[float] = []
    # perf_counter is monotonic and fine-grained but has no epoch: one offset,
    # taken once per run, turns its readings into the epoch seconds Call wants.
    to_epoch = time.time() - time.perf_counter()
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(requests):
        queue.put_nowait(i)

    async def worker(session: aiohttp.ClientSession) -> None:
        while not queue.empty():
            i = queue.get_nowait()
            body = {
                "workflow_id": f"wf-{i}",
                "attendees": [f"person-{i}@example.com"],
                "start": "2031-03-03T10:00:00Z",
                "duration_minutes": 30,
            }
            headers = {"Authorization": f"Bearer {keys[i % len(keys)]}"}
            started = time.perf_counter()
            async with session.post(f"{base}/v1/holds", json=body, headers=headers) as resp:
                raw = await resp.read()
                if resp.status != 201:
                    raise RuntimeError(f"unexpected {resp.status}")
                key = resp.headers.get("Idempotency-Key")
                replayed = resp.headers.get("Idempotent-Replayed")
            ended = time.perf_counter()
            latencies.append(ended - started)
            answers.append(
                (i, body, resp.status, raw, key, replayed, started + to_epoch, ended + to_epoch)
            )

    # One connection per worker, each kept alive: the kernel spreads the 64
    # connections over the processes that share the port.
    connector = aiohttp.TCPConnector(limit=CONCURRENCY)
    async with aiohttp.ClientSession(connector=connector) as session:
        started = time.perf_counter()
        await asyncio.gather(*(worker(session) for _ in range(CONCURRENCY)))
        return time.perf_counter() - started, sorted(latencies)


def _serve(url: str, workers: int) -> tuple[subprocess.Popen[bytes], str]:
    port = _free_port()
    # The per-agent rate limit (on by default) would cap what this measures.
    env = {**os.environ, "SLOTWARD_RATE_LIMIT": "0"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "slotward.api.cli", "--db", url, "serve", "--port", str(port),
         "--workers", str(workers)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            urllib.request.urlopen(f"{base}/healthz", timeout=1).close()
            return proc, base
        except OSError:
            if time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError("server did not start") from None
            time.sleep(0.1)


def _history(answers: list[Answer], tenants: int) -> list[Call]:
    """The recorded answers as the checker's calls: one intent label per index."""
    return [
        Call("create", f"tenant-{i % tenants}", "bench", body, status, raw,
             {"Idempotency-Key": key or "", "Idempotent-Replayed": replayed or ""},
             invoked_at=started, completed_at=ended, intent=f"hold-{i}")
        for i, body, status, raw, key, replayed, started, ended in answers
    ]  # fmt: skip


def _checked(url: str, answers: list[Answer], tenants: int) -> tuple[int, list[Violation]]:
    calls = _history(answers, tenants)
    return len(calls), check(calls, load_snapshot(url), datetime.now(UTC))


def measure(requests: int) -> tuple[list[Result], list[Violation]]:
    pg = start_postgres()
    results: list[Result] = []
    violations: list[Violation] = []
    try:
        for tenants in (1, 16):
            for workers in (1, 2, 4):
                url = pg.create_database(f"bench_{tenants}_{workers}")
                keys = asyncio.run(_keys(url, tenants))
                proc, base = _serve(url, workers)
                answers: list[Answer] = []
                try:
                    asyncio.run(_drive(base, keys, 200, answers))  # warm up connections, caches
                    seconds, lat = asyncio.run(_drive(base, keys, requests, answers))
                finally:
                    proc.terminate()
                    proc.wait(timeout=60)
                checked, found = _checked(url, answers, tenants)
                violations += found
                results.append(
                    Result(
                        scenario=f"creates-{workers}p-{tenants}t",
                        processes=workers,
                        tenants=tenants,
                        requests=requests,
                        seconds=round(seconds, 3),
                        req_per_s=round(requests / seconds, 1),
                        p50_ms=round(lat[len(lat) // 2] * 1000, 1),
                        p99_ms=round(lat[int(len(lat) * 0.99)] * 1000, 1),
                        calls_checked=checked,
                        violations=len(found),
                    )
                )
    finally:
        pg.stop()
    for r in results:
        one = next(b for b in results if b.tenants == r.tenants and b.processes == 1)
        r.ratio_to_one_process = round(r.req_per_s / one.req_per_s, 2)
    return results, violations


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results, violations = measure(args.requests)
    print(f"{'scenario':<18}{'req/s':>9}{'p50 ms':>9}{'p99 ms':>9}{'x 1 proc':>10}"
          f"{'checked':>9}{'broken':>8}")  # fmt: skip
    for r in results:
        print(f"{r.scenario:<18}{r.req_per_s:>9}{r.p50_ms:>9}{r.p99_ms:>9}"
              f"{r.ratio_to_one_process:>10}{r.calls_checked:>9}{r.violations:>8}")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in results], indent=2))
    print(f"cores: {os.cpu_count()}; client and servers share them")
    for v in violations:
        print(f"VIOLATION {v.rule}: {v.detail}", file=sys.stderr)
    if violations:
        sys.exit(1)


if __name__ == "__main__":
    main()
