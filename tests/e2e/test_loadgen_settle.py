"""A phase's server CPU counts what the server does after answering, because of the calls.

A real server process that answers at once and spends CPU a second later for
each call (as slotward's relay and storm watch do, sooner), driven by the real
load generator process (benchmarks/loadgen.py ``drive``).
"""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from slotward.benchmarks.baseline import plan, settle_seconds
from slotward.benchmarks.interleave import in_turns, merged, split
from slotward.benchmarks.loadgen import PlanError, drive, run_plan
from slotward.benchmarks.results import Settings
from slotward.benchmarks.servers import echo_server, free_port

LATER = 1.0  # the server spends its CPU this long after answering
SPENT = 0.1  # CPU seconds a call costs it then
CALLS = 3

_SERVER = f"""
import asyncio, sys, time
from aiohttp import web

def spend():
    start = time.thread_time()
    while time.thread_time() - start < {SPENT}:
        pass

async def call(request):
    await request.read()
    asyncio.get_running_loop().call_later({LATER}, spend)
    return web.json_response({{}}, status=201)

app = web.Application()
app.router.add_post("/call", call)
app.router.add_get("/healthz", lambda request: web.json_response({{}}))
web.run_app(app, host="127.0.0.1", port=int(sys.argv[1]), print=None)
"""


@pytest.fixture
def deferring(tmp_path: Path) -> Iterator[tuple[str, int]]:
    """A server that defers each call's work by LATER: (its base URL, its pid)."""
    port = free_port()
    with (tmp_path / "server.log").open("wb") as log:
        proc = subprocess.Popen([sys.executable, "-c", _SERVER, str(port)], stdout=log,
                                stderr=subprocess.STDOUT)  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(base + "/healthz", timeout=5).close()
                break
            except OSError:
                assert time.monotonic() < deadline, (tmp_path / "server.log").read_text()
                time.sleep(0.05)
        yield base, proc.pid
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _phase(base: str, pid: int, settle: float) -> dict[str, object]:
    calls = [[[{"op": "post", "path": "/call", "body": {}}]] for _ in range(CALLS)]
    return {"name": "deferred", "base": base, "tasks": calls, "concurrency": 1,
            "max_seconds": 30, "expect": [201], "server_pid": pid,
            "settle_seconds": settle}  # fmt: skip


def test_a_settled_phase_counts_the_work_its_calls_left_behind(
    deferring: tuple[str, int],
) -> None:
    base, pid = deferring
    # The wait leaves room for a loaded machine to give the server its CPU late.
    answer = drive({"keys": [], "concurrency": 1, "phases": [_phase(base, pid, LATER + 3)]})
    [measured] = answer["phases"]
    assert (measured["requests"], measured["errors"]) == (CALLS, 0), measured
    # Every call's deferred CPU, in clock ticks (10 ms) that may round each down.
    assert measured["server_cpu_seconds"] >= CALLS * SPENT - 0.05, measured["server_cpu_seconds"]
    # The readings a span is made of (benchmarks/interleave.py) are the same count's.
    spanned = measured["server_cpu_end"] - measured["server_cpu_start"]
    assert spanned == pytest.approx(measured["server_cpu_seconds"]), measured


async def test_a_settle_out_of_bounds_is_refused(deferring: tuple[str, int]) -> None:
    base, pid = deferring
    for settle in (-1.0, 61.0, float("nan")):
        bad = {"keys": [], "phases": [_phase(base, pid, settle)]}
        with pytest.raises(PlanError, match=r"settle_seconds must be within 0\.\.60"):
            drive(bad)  # before a load generator is started
        with pytest.raises(PlanError, match=r"settle_seconds must be within 0\.\.60"):
            await run_plan(bad)  # the load generator's own, before the phase's calls


def test_the_bench_settles_for_a_sweep_and_a_relay_turn(tmp_path: Path) -> None:
    assert settle_seconds({}) == pytest.approx(1.0 + 0.2 + 0.5)
    env = {"SLOTWARD_SWEEP_INTERVAL": "2", "SLOTWARD_RELAY_INTERVAL": "1"}
    assert settle_seconds(env) == pytest.approx(3.5)
    env = {"SLOTWARD_SWEEP_INTERVAL": "30", "SLOTWARD_RETRY_STORM_WINDOW": "600"}
    assert settle_seconds(env) == 5.0  # capped: every phase waits it
    settings = Settings(requests=1, concurrency=1)
    with echo_server(1, tmp_path) as base:
        ours = plan(settings, [{"name": "p", "base": base, "tasks": []}])["phases"][0]
    assert ours["server_pid"] > 0
    assert ours["settle_seconds"] == settle_seconds()
    other = plan(settings, [{"name": "p", "base": "http://127.0.0.1:1", "tasks": []}])
    assert "settle_seconds" not in other["phases"][0]  # not a server of ours: nothing to wait for


def test_phases_in_turns_count_each_servers_deferred_work_over_its_span(
    deferring: tuple[str, int], tmp_path: Path
) -> None:
    # The deferring server's first slice waits for nothing: its calls' work
    # lands a second later, while the echo server's last slice settles, and
    # still counts as its own (read per slice, it would be left out).
    base, pid = deferring
    settings = Settings(requests=1, concurrency=1)
    with echo_server(1, tmp_path) as echo:
        echoes = [[[{"op": "post", "path": "/echo", "body": {}}]] for _ in range(4)]
        other = {"name": "echo", "base": echo, "tasks": echoes, "concurrency": 1,
                 "max_seconds": 30, "expect": [200]}  # fmt: skip
        calls = [[[{"op": "post", "path": "/call", "body": {}}]] for _ in range(2 * CALLS)]
        mine = {"name": "deferred", "base": base, "tasks": calls, "concurrency": 1,
                "max_seconds": 30, "expect": [201], "server_pid": pid}  # fmt: skip
        turns = in_turns(mine, other, 2)
        assert [t["name"] for t in turns] == [
            "echo#open", "deferred#0", "echo#0", "echo#1", "deferred#1", "echo#close",
        ]  # fmt: skip
        turns[-2]["settle_seconds"] = LATER + 3  # room for a loaded machine, as above
        answer = drive(plan(settings, turns))  # the plan names the echo server's pid
    sides = split(answer["phases"])
    deferred, echoed = merged("deferred", sides["deferred"]), merged("echo", sides["echo"])
    assert (deferred["requests"], deferred["errors"]) == (2 * CALLS, 0), deferred
    assert (echoed["requests"], echoed["errors"]) == (4, 0), echoed
    # Every call's deferred CPU (clock ticks may round each down), none of it the echo's.
    assert deferred["server_cpu_seconds"] >= 2 * CALLS * SPENT - 0.1, deferred
    assert echoed["server_cpu_seconds"] < CALLS * SPENT, echoed
