"""The load generator: runs a plan of HTTP calls in its own process and answers JSON.

    python -m slotward.benchmarks.loadgen [PLAN_FILE]   # the plan on stdin without a file

It runs in a process of its own so its CPU is its own: client and server share
the machine, and ``cpu_seconds`` per phase tells how much of it the client
took. Loopback only (a plan naming another host is refused), bounded in
requests (the plan lists every call) and in seconds (no task starts after a
phase's ``max_seconds``; calls in flight finish, each given at most
``max_seconds`` + 10 s before it counts as unanswered: a hung server cannot
hold a run up for long).

A plan (JSON)::

    {"keys": ["sw_key_..", ...], "concurrency": 64, "max_seconds": 60,
     "phases": [{"name": "creates", "base": "http://127.0.0.1:8123",
                 "tasks": [[[CALL, ...], ...], ...],   # task -> steps -> calls
                 "concurrency": 64, "max_seconds": 60, "expect": [200, 201],
                 "record": false, "fresh_connections": false,
                 "server_pid": 4242, "settle_seconds": 1.5}]}

``concurrency`` workers take tasks in order; a task's steps run one after the
other, the calls of one step at once (a duplicate sent while its original is in
flight). A CALL is ``{"op": "post" | "get" | "commit" | "release", "path": ...,
"body": ..., "key": <index into keys>, "id": ..., "of": ..., "intent": ...}``:
``post`` and ``get`` send ``body`` to ``path``; ``commit`` and ``release`` act
on the hold named by the first 2xx answer of the call(s) whose ``id`` is
``of`` (in any earlier step or phase), and are skipped when there is none.

The answer, per phase: ``requests`` (calls made), ``seconds`` (first call to
last answer), ``latencies_ms`` (sorted), ``statuses``, ``errors`` (no answer,
or a status outside ``expect``) with a few samples, ``skipped``,
``replayed`` (answers with ``Idempotent-Replayed: true``), ``codes`` (the
problem codes of 4xx and 5xx answers), ``cpu_seconds`` (the load generator's),
``server_cpu_seconds`` (when the phase names its server's ``server_pid``: the
CPU that process and its descendants spent over the phase, else None; with
``settle_seconds``, until that long after the last answer: what the server
does after answering, because of the calls, is theirs), the server's own
count at the phase's start and end (``server_cpu_start``, ``server_cpu_end``:
phases run in turns with another server's are counted over their whole
span, benchmarks/interleave.py), ``stopped_early``, and with ``record`` every call in full
(request, status, raw body in base64, headers, epoch times, intent) for the
history checker.
"""

from __future__ import annotations

import asyncio
import base64
import json
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from slotward.benchmarks.cpu import tree_cpu_seconds

__all__ = ["LOOPBACK", "PlanError", "check_loopback", "drive", "run_plan"]

LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})
_SAMPLES = 5
_GRACE_SECONDS = 10.0
_SETTLE_MAX = 60.0
_HEADERS = ("Idempotency-Key", "Idempotent-Replayed")


class PlanError(ValueError):
    """A plan the load generator refuses (another host, a call it cannot make)."""


@dataclass
class _Phase:
    """What one phase has measured so far."""

    expect: frozenset[int]
    record: bool
    timeout: aiohttp.ClientTimeout  # per call
    latencies: list[float] = field(default_factory=list)
    statuses: Counter[str] = field(default_factory=Counter)
    errors: int = 0
    samples: list[str] = field(default_factory=list)
    skipped: int = 0
    replayed: int = 0
    codes: Counter[str] = field(default_factory=Counter)  # problem codes of 4xx/5xx answers
    records: list[dict[str, Any]] = field(default_factory=list)

    def fail(self, what: str) -> None:
        self.errors += 1
        if len(self.samples) < _SAMPLES:
            self.samples.append(what)


class _Runner:
    """Runs phases against sessions kept alive across phases (warm-up included)."""

    def __init__(self, plan: Mapping[str, Any]) -> None:
        self.keys: list[str] = [str(k) for k in plan.get("keys", [])]
        self.concurrency = int(plan.get("concurrency", 64))
        self.max_seconds = float(plan.get("max_seconds", 60))
        self.held: dict[str, tuple[str, int]] = {}  # call id -> (hold id, token) answered
        self.sessions: dict[tuple[str, bool], aiohttp.ClientSession] = {}
        # perf_counter has no epoch: one offset turns its readings into epoch seconds.
        self.to_epoch = time.time() - time.perf_counter()

    def session(self, base: str, fresh: bool) -> aiohttp.ClientSession:
        if (base, fresh) not in self.sessions:
            connector = aiohttp.TCPConnector(limit=0, force_close=fresh)
            self.sessions[base, fresh] = aiohttp.ClientSession(connector=connector)
        return self.sessions[base, fresh]

    async def close(self) -> None:
        for session in self.sessions.values():
            await session.close()

    async def phase(self, spec: Mapping[str, Any]) -> dict[str, Any]:
        base = str(spec["base"]).rstrip("/")
        check_loopback(base)
        bound = float(spec.get("max_seconds", self.max_seconds))
        state = _Phase(
            frozenset(spec.get("expect", (200, 201))),
            bool(spec.get("record")),
            aiohttp.ClientTimeout(total=bound + _GRACE_SECONDS),
        )
        session = self.session(base, bool(spec.get("fresh_connections")))
        tasks: Iterator[list[list[dict[str, Any]]]] = iter(spec["tasks"])
        workers = int(spec.get("concurrency", self.concurrency))
        deadline = time.perf_counter() + bound
        stopped = False

        async def worker() -> None:
            nonlocal stopped
            for task in tasks:  # one shared iterator: each task goes to one worker
                for step in task:
                    await asyncio.gather(*(self.call(session, base, c, state) for c in step))
                if time.perf_counter() > deadline:
                    stopped = True
                    return

        settle = _settle(spec)
        server = None if spec.get("server_pid") is None else int(spec["server_pid"])
        cpu_start = None if server is None else tree_cpu_seconds(server)
        cpu, started = time.process_time(), time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(max(1, workers))))
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
        cpu_end = None if server is None else await _settled(server, settle)
        server_cpu = None if cpu_start is None or cpu_end is None else cpu_end - cpu_start
        return {
            "name": spec.get("name", ""),
            "requests": len(state.latencies),
            "seconds": seconds,
            "latencies_ms": sorted(state.latencies),
            "statuses": dict(sorted(state.statuses.items())),
            "errors": state.errors,
            "error_samples": state.samples,
            "skipped": state.skipped,
            "replayed": state.replayed,
            "codes": dict(sorted(state.codes.items())),
            "cpu_seconds": cpu,
            "server_cpu_seconds": server_cpu,
            "server_cpu_start": cpu_start,
            "server_cpu_end": cpu_end,
            "stopped_early": stopped or next(tasks, None) is not None,
            "records": state.records,
        }

    async def call(
        self, session: aiohttp.ClientSession, base: str, call: Mapping[str, Any], state: _Phase
    ) -> None:
        made = self.request(call)
        if made is None:
            state.skipped += 1
            return
        method, path, data = made
        headers = {"Content-Type": "application/json", **call.get("headers", {})}
        if call.get("key") is not None:
            headers["Authorization"] = f"Bearer {self.keys[int(call['key'])]}"
        status: int | None = None
        raw, answered = b"", {}
        started = time.perf_counter()
        try:
            async with session.request(
                method, base + path, data=data, headers=headers, timeout=state.timeout
            ) as resp:
                raw = await resp.read()
                status = resp.status
                answered = {h: resp.headers[h] for h in _HEADERS if h in resp.headers}
        except (aiohttp.ClientError, TimeoutError) as exc:
            state.fail(f"{method} {path}: {type(exc).__name__}: {exc}")
        ended = time.perf_counter()
        state.latencies.append((ended - started) * 1000)
        if status is not None:
            state.statuses[str(status)] += 1
            state.replayed += answered.get("Idempotent-Replayed") == "true"
            if status >= 400:
                state.codes[_code(raw)] += 1
            if status not in state.expect:
                state.fail(f"{method} {path}: {status} {raw[:300].decode(errors='replace')}")
            elif call.get("id") is not None and 200 <= status < 300:
                self.remember(str(call["id"]), raw)
        if state.record:
            state.records.append({
                "op": call.get("op"), "key": call.get("key"), "target": _target(path, call),
                "request": json.loads(data) if data else {}, "status": status,
                "body": base64.b64encode(raw).decode(), "headers": answered,
                "sent_key": call.get("headers", {}).get("Idempotency-Key"),
                "invoked": started + self.to_epoch, "completed": ended + self.to_epoch
                if status is not None else None, "intent": call.get("intent"),
            })  # fmt: skip

    def request(self, call: Mapping[str, Any]) -> tuple[str, str, bytes | None] | None:
        """(method, path, body) of ``call``; None for a commit or release with no hold."""
        op = call.get("op", "post")
        if op in ("commit", "release"):
            held = self.held.get(str(call.get("of")))
            if held is None:
                return None
            hold_id, token = held
            body = {"token": token} if op == "commit" else {}
            return "POST", f"/v1/holds/{hold_id}/{op}", json.dumps(body).encode()
        if op not in ("post", "get"):
            raise PlanError(f"unknown op {op!r}")
        sent = call.get("body")
        data = None if sent is None else json.dumps(sent).encode()
        return op.upper(), str(call["path"]), data

    def remember(self, call_id: str, raw: bytes) -> None:
        if call_id in self.held:
            return
        try:
            doc = json.loads(raw)
        except ValueError:
            return
        if isinstance(doc, dict) and isinstance(doc.get("id"), str):
            self.held[call_id] = (doc["id"], int(doc.get("token", 0)))


def _code(raw: bytes) -> str:
    """The ``code`` of a problem+json answer, or ``?``."""
    try:
        doc = json.loads(raw)
    except ValueError:
        return "?"
    return str(doc.get("code", "?")) if isinstance(doc, dict) else "?"


def _target(path: str, call: Mapping[str, Any]) -> str | None:
    """The hold id a commit or release acted on (the path parameter)."""
    return path.split("/")[3] if call.get("op") in ("commit", "release") else None


def check_loopback(base: str) -> None:
    host = urlsplit(base).hostname
    if host not in LOOPBACK:
        raise PlanError(f"the load generator only calls loopback addresses, not {host!r}")


async def run_plan(plan: Mapping[str, Any]) -> dict[str, Any]:
    """Run every phase of ``plan`` in order; the answer described in the module."""
    for spec in plan.get("phases", []):
        check_loopback(str(spec.get("base", "")))
    runner = _Runner(plan)
    try:
        return {"phases": [await runner.phase(spec) for spec in plan.get("phases", [])]}
    finally:
        await runner.close()


def _settle(spec: Mapping[str, Any]) -> float:
    """A phase's ``settle_seconds``, or PlanError."""
    settle = float(spec.get("settle_seconds", 0))
    if not 0 <= settle <= _SETTLE_MAX:  # NaN fails both
        raise PlanError(f"settle_seconds must be within 0..{_SETTLE_MAX:g}, not {settle}")
    return settle


async def _settled(server: int, settle: float) -> float:
    """The server's CPU count ``settle`` seconds after the phase's last answer.

    A server may carry part of a call's work out after answering it (slotward:
    the relay's turn, the storm watch's hand-over of replay counts); counted
    only up to the last answer, a short phase would leave most of it out and
    a server that defers work would look cheaper than it is. Its idle
    background over those seconds (slotward's sweeps and timers: some 7 ms a
    second) is counted too, which errs against the server.
    """
    if settle > 0:
        await asyncio.sleep(settle)
    return tree_cpu_seconds(server)


def drive(plan: Mapping[str, Any]) -> dict[str, Any]:
    """Run ``plan`` in a load generator process of its own and return its answer."""
    default = plan.get("max_seconds", 60)
    bound = sum(float(p.get("max_seconds", default)) + _settle(p) for p in plan["phases"])
    done = subprocess.run(
        [sys.executable, "-m", "slotward.benchmarks.loadgen"],
        input=json.dumps(plan).encode(),
        capture_output=True,
        timeout=bound + 300,  # the phases' bounds, plus calls in flight and start-up
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the load generator failed: {done.stderr.decode()[-2000:]}")
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    source = open(args[0], "rb") if args else sys.stdin.buffer  # noqa: SIM115
    with source:
        plan = json.load(source)
    try:
        answer = asyncio.run(run_plan(plan))
    except PlanError as error:
        print(f"loadgen: {error}", file=sys.stderr)
        return 2
    json.dump(answer, sys.stdout)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
