"""The issue's targets as `slotward bench` states them, the burst's plan, and the recorder."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from slotward.api.config import Config
from slotward.api.http.edges import build_runner
from slotward.benchmarks.burst import bursts
from slotward.benchmarks.recording import Recorder
from slotward.benchmarks.results import Result, Settings, Target, pooled
from slotward.benchmarks.throughput import creates_against_reference, replays_against_fresh
from slotward.engine.model import Principal

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def _result(name: str, req_per_s: float, p99: float, cpu: float | None) -> Result:
    return Result(name, 100, 100 / req_per_s, req_per_s, 1.0, 2.0, p99, 0, 64, "sqlite", 1, 0.1,
                  server_cpu_us_per_call=cpu)  # fmt: skip


def _by_goal(targets: list[Target]) -> dict[float, Target]:
    return {t.threshold: t for t in targets}


def test_sqlite_creates_meet_rate_p99_and_cpu_against_the_reference() -> None:
    creates, reference = _result("creates", 500, 30, 900), _result("reference", 1000, 12, 400)
    found = _by_goal(creates_against_reference(Settings(), creates, reference))
    assert (found[0.5].measured, found[0.5].at_least) == (0.5, True)
    assert (found[3.0].measured, found[3.0].at_least) == (2.5, False)
    cpu = found[2.0]  # server CPU per create at most twice the reference's
    assert (cpu.measured, cpu.at_least, cpu.met) == (2.25, False, False)
    assert "server CPU per create / the reference's" in cpu.name
    assert creates.extra["cpu_ratio_to_reference"] == 2.25


def test_a_cpu_not_measured_misses_its_target() -> None:
    creates, reference = _result("creates", 500, 30, None), _result("reference", 1000, 12, 400)
    found = _by_goal(creates_against_reference(Settings(), creates, reference))
    assert math.isnan(found[2.0].measured)
    assert not found[2.0].met
    assert creates.extra["cpu_ratio_to_reference"] is None  # JSON null, not NaN


@pytest.mark.parametrize(("tenants", "goal"), [(1, 0.7), (16, 0.6)])
def test_postgresql_goals_follow_the_tenants(tenants: int, goal: float) -> None:
    settings = Settings(db="postgresql://u@h/db", workers=2)
    creates, reference = _result("creates", 650, 30, 900), _result("reference", 1000, 12, 400)
    (target,) = creates_against_reference(settings, creates, reference, tenants)
    assert (target.threshold, target.measured, target.at_least) == (goal, 0.65, True)
    assert target.met is (goal == 0.6)
    assert f"{tenants} tenant" in target.name
    assert creates.extra["tenants"] == tenants


def test_replays_must_be_three_times_fresh_creates_by_rate_and_by_cpu() -> None:
    fresh, again = _result("creates", 400, 30, 1800), _result("replays", 1000, 12, 900)
    rate, cpu = replays_against_fresh(fresh, again)
    assert (rate.threshold, rate.measured, rate.met) == (3.0, 2.5, False)
    assert (cpu.threshold, cpu.measured, cpu.met) == (3.0, 2.0, False)  # 1800 us / 900 us
    assert (again.extra["ratio_to_fresh"], again.extra["cpu_ratio_to_fresh"]) == (2.5, 2.0)


def test_bursts_are_never_seen_keys_on_distinct_attendees() -> None:
    planned = bursts(Settings(concurrency=200, requests=1000))
    assert [len(b) for b in planned] == [200] * 5
    calls = [call for b in planned for call in b]
    for field in ("workflow_id", "attendees"):
        assert len({str(c["body"][field]) for c in calls}) == 1000
    assert {c["key"] for c in planned[0]} == set(range(200))  # one agent per connection
    assert [len(b) for b in bursts(Settings(concurrency=200, requests=50))] == [200]


def test_pooled_phases_add_up() -> None:
    one = {"requests": 2, "seconds": 1.0, "latencies_ms": [3.0, 1.0], "errors": 0,
           "error_samples": [], "cpu_seconds": 0.1, "replayed": 0, "statuses": {"201": 2},
           "codes": {}, "stopped_early": False, "server_cpu_seconds": 0.5}  # fmt: skip
    two = {**one, "latencies_ms": [2.0], "requests": 1, "statuses": {"503": 1}, "errors": 1,
           "codes": {"store_busy": 1}, "error_samples": ["503"]}  # fmt: skip
    both = pooled([one, two])
    assert (both["requests"], both["seconds"], both["errors"]) == (3, 2.0, 1)
    assert both["latencies_ms"] == [1.0, 2.0, 3.0]
    assert both["statuses"] == {"201": 2, "503": 1}
    assert both["server_cpu_seconds"] == 1.0


async def test_the_recorder_keeps_answered_and_unanswered_calls() -> None:
    async def created(request: web.Request) -> web.Response:
        headers = {"Idempotency-Key": "idem_1", "Idempotent-Replayed": "false"}
        return web.json_response({"id": "hold_1"}, status=201, headers=headers)

    async def reset(request: web.Request) -> web.Response:
        assert request.transport is not None
        request.transport.close()  # no answer at all
        return web.Response()

    app = web.Application()
    app.router.add_post("/ok", created)
    app.router.add_post("/gone", reset)
    runner = build_runner(app, Config(), shutdown_timeout=0.5)  # served as slotward serves
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    base = f"http://127.0.0.1:{runner.addresses[0][1]}"
    who, recorder = Principal("t", "agent-1", "agent", 50), Recorder()
    body: dict[str, Any] = {"workflow_id": "wf"}
    try:
        async with aiohttp.ClientSession() as session:
            status, raw, headers = await recorder.post(
                session, f"{base}/ok", body, who=who, secret="s", op="create", intent="i1"
            )
            with pytest.raises(aiohttp.ClientError):
                await recorder.post(session, f"{base}/gone", body, who=who, secret="s",
                                    op="commit", target="hold_1")  # fmt: skip
    finally:
        await runner.cleanup()
    assert (status, headers["Idempotency-Key"]) == (201, "idem_1")
    answered, lost = recorder.calls
    assert (answered.op, answered.tenant, answered.agent, answered.intent) == (
        "create", "t", "agent-1", "i1")  # fmt: skip
    assert (answered.status, answered.body, answered.key, answered.fresh) == (
        201, raw, "idem_1", True)  # fmt: skip
    assert answered.request == body
    assert answered.completed_at is not None
    assert answered.completed_at >= answered.invoked_at
    assert (lost.op, lost.status, lost.completed_at, lost.target) == (
        "commit",
        None,
        None,
        "hold_1",
    )


def test_every_benchmark_that_starts_slotward_checks_its_history() -> None:
    """The invariants are kept on every run: a benchmark module that starts a slotward
    server also hands its recorded calls to the history checker."""
    starters = [p for p in BENCHMARKS.glob("*.py") if "slotward_server(" in p.read_text()]
    assert len(starters) >= 8
    for path in starters:
        if path.name == "servers.py":  # where it is defined
            continue
        text = path.read_text()
        assert "check_history(" in text or "verdict(" in text, path.name
        assert "record=True" in text or "Recorder(" in text, path.name
