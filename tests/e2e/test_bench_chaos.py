"""`slotward bench chaos` and `slotward demo` run for real, small: a real server killed
and restarted, real agents, the real store read at the end.

Nothing here asserts a speed. A run on a correct server has no duplicate, no
double booking, no history violation and every intent landed or refused, and
its JSON says what its table says; a store with a planted duplicate and a
planted double booking is caught, as is an intent left open.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, insert
from sqlalchemy.pool import NullPool

from slotward.adapters.store import tables as t
from slotward.api.bootstrap import migrate
from slotward.api.config import Config
from slotward.benchmarks import chaos as chaos_module
from slotward.benchmarks import servers
from slotward.benchmarks.chaos import ChaosSettings, judge, run_chaos
from slotward.benchmarks.chaos_agents import Track
from slotward.benchmarks.chaos_faults import TENANT, make_plan
from slotward.benchmarks.chaos_report import KEYS
from slotward.benchmarks.servers import Restartable, make_keys
from slotward.engine.model import Principal
from tests.pgserver import PgServer

CLI = [sys.executable, "-m", "slotward.api.cli.main"]
# Small, and long enough that the server is killed while the agents work.
PASSWORD = "chaos-pw-never-shown"
SMALL = ("--agents", "12", "--intents", "6", "--kill-every", "1", "--think", "0.3")


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, *args], capture_output=True, text=True, timeout=600,
                          check=False)  # fmt: skip


def _table(stdout: str) -> dict[str, str]:
    """The printed report: key -> the value as printed."""
    rows = (re.match(r"  (\w+)\s+(.*)$", line) for line in stdout.splitlines())
    return {m[1]: m[2] for m in rows if m is not None}


def _chaos_run(tmp_path: Path, *args: str) -> dict[str, Any]:
    out = tmp_path / "chaos.json"
    done = _run("bench", "chaos", *SMALL, "--json", str(out), *args)
    assert done.returncode == 0, done.stdout + done.stderr
    assert PASSWORD not in done.stdout + done.stderr + out.read_text()
    report: dict[str, Any] = json.loads(out.read_text())
    assert set(KEYS) | {"settings", "faults", "ok"} == set(report)
    assert report["ok"] is True
    assert report["intents"] == 12 * 6
    assert report["duplicates"] == report["double_bookings"] == 0
    assert report["history_violations"] == report["server_errors"] == report["unresolved"] == 0
    assert report["landed"] + sum(report["refused"].values()) == report["intents"]
    assert report["kills"] >= 1  # the server was killed while the agents worked
    assert report["calls"] > report["intents"]
    assert report["retries_per_intent"] > 0  # lost answers and outages were retried
    assert 0 < report["p50_ms"] <= report["p99_ms"]
    # Every kind of fault met at least one intent.
    assert {"lost-create", "lost-commit", "duplicate", "drift", "release"} <= set(report["faults"])
    printed = _table(done.stdout)
    for key in KEYS:  # the table says what the JSON says
        if key == "refused":
            assert printed[key].split()[0] == str(sum(report[key].values()))
        else:
            assert printed[key] == str(report[key]), key
    assert "invariants: OK" in done.stdout
    assert "VIOLATION" not in done.stdout
    return report


def test_chaos_on_sqlite_with_kills_lands_every_intent_once(tmp_path: Path) -> None:
    report = _chaos_run(tmp_path)
    assert report["settings"] == {"agents": 12, "intents": 6, "db": "sqlite", "workers": 1,
                                  "kill_every": 1.0, "seed": 0, "think": 0.3}  # fmt: skip


def test_chaos_on_postgresql_with_two_workers_and_kills(postgres: PgServer, tmp_path: Path) -> None:
    # A password in the URL (trust authentication ignores it) is never printed or written.
    url = postgres.url("postgres").replace("postgres@", f"postgres:{PASSWORD}@", 1)
    report = _chaos_run(tmp_path, "--db", url, "--workers", "2", "--seed", "3")
    assert report["settings"]["workers"] == 2
    assert report["settings"]["db"] == "postgresql"


def test_demo_runs_to_the_end_without_a_terminal() -> None:
    done = _run("demo", "--agents", "5", "--intents", "3", "--kill-every", "1", "--think", "0.2")
    assert done.returncode == 0, done.stdout + done.stderr
    for agent in range(5):  # one row per agent, each with its three intents done
        assert re.search(rf"agent-{agent} .* 3/3 ", done.stdout), done.stdout
    assert "\x1b[" not in done.stdout  # no live terminal output in a pipe
    assert "invariants: OK" in done.stdout


def test_bad_settings_are_refused_before_anything_runs() -> None:
    done = _run("bench", "chaos", "--agents", "0")
    assert done.returncode == 2
    assert "--agents" in done.stderr
    done = _run("bench", "chaos", "--kill-every", "-1")
    assert done.returncode == 2
    assert "--kill-every" in done.stderr
    done = _run("bench", "chaos", "--think", "inf")
    assert done.returncode == 2
    assert "--think must be a finite number" in done.stderr


def _us(at: datetime) -> int:
    return int(at.timestamp() * 1_000_000)


def _hold(n: int, workflow: str, attendee: str, start: datetime, status: str) -> dict[str, Any]:
    now = datetime.now(UTC)
    return {
        "id": f"hold_planted_{n}", "tenant": TENANT, "key": f"idem_planted_{n}",
        "workflow_id": workflow, "agent_id": "agent-0", "attendees": json.dumps([attendee]),
        "start_us": _us(start), "end_us": _us(start + timedelta(minutes=30)), "title": "planted",
        "description": None, "priority": 50, "status": status,
        "expires_us": _us(now + timedelta(hours=1)), "token": 1, "intent_fp": f"fp{n}",
        "created_us": _us(now), "updated_us": _us(now), "committed_us": None,
        "preempted_by": None, "audit_seq": n, "event_seq": 0,
    }  # fmt: skip


def test_planted_duplicates_double_bookings_and_open_intents_are_violations(
    tmp_path: Path,
) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'planted.db'}"
    asyncio.run(migrate(Config(db_url=url)))
    at = datetime.now(UTC) + timedelta(days=2)
    rows = [
        # one intent (workflow) holding two live holds, on two attendees: a duplicate
        _hold(1, "chaos-0-0", "att_a", at, "held"),
        _hold(2, "chaos-0-0", "att_b", at + timedelta(hours=3), "committed"),
        # two workflows overlapping on one attendee: a double booking
        _hold(3, "chaos-1-0", "att_c", at, "committed"),
        _hold(4, "chaos-2-0", "att_c", at + timedelta(minutes=15), "held"),
        # released and back to back: neither a duplicate nor a double booking
        _hold(5, "chaos-3-0", "att_d", at, "released"),
        _hold(6, "chaos-3-0", "att_d", at + timedelta(minutes=30), "committed"),
    ]
    engine = create_engine(f"sqlite:///{tmp_path / 'planted.db'}", poolclass=NullPool)
    with engine.begin() as conn:
        conn.execute(insert(t.holds), rows)
    engine.dispose()
    plan = make_plan(1, 2, seed=0)[0]
    landed = Track(plan.intents[0], outcome="landed", hold_id="hold_planted_3")
    believed = Track(plan.intents[1], outcome="landed", hold_id="hold_planted_5")
    open_ = Track(plan.intents[1], outcome="unresolved", reason="no answer to the create")
    settings = ChaosSettings(1, 2)
    report, problems = judge(url, [landed, believed, open_], [], settings)
    assert report["duplicates"] == 1
    assert report["double_bookings"] == 1
    assert report["unresolved"] == 1
    assert report["ok"] is False
    assert any("chaos-0-0 holds 2 holds" in p for p in problems), problems
    assert any("hold_planted_3" in p and "overlaps hold_planted_4" in p for p in problems)
    assert any("hold_planted_5, which the store has released" in p for p in problems)
    assert any("ended unresolved" in p for p in problems)
    # hold_planted_3 is committed as its agent believes: no complaint names it so
    assert not any("on hold_planted_3" in p for p in problems)
    # and the history checker finds holds no call made and the audit log never saw
    assert report["history_violations"] > 0
    assert any(p.startswith("commits_with_current_token:") for p in problems)


def _restartable(tmp_path: Path) -> Restartable:
    url = f"sqlite+aiosqlite:///{tmp_path / 'crash.db'}"
    make_keys(url, [Principal(TENANT, "agent-0", "agent", 50)])
    return Restartable(url, 1, tmp_path)


def test_a_server_that_dies_on_its_own_is_a_crash_not_a_kill(tmp_path: Path) -> None:
    server = _restartable(tmp_path)
    server.start()
    try:
        assert server._proc is not None
        os.kill(server._proc.pid, signal.SIGSEGV)  # it dies between two kills
        server._proc.wait()
        server.kill()  # what the harness does next: this one finds it dead
        assert server.kills == 0
        assert len(server.crashes) == 1
        assert str(-signal.SIGSEGV) in server.crashes[0]
        server.start()  # started again, the crash kept
        server.kill()  # a kill of a live server is no crash
        assert (server.kills, len(server.crashes)) == (1, 1)
        server.start()
    finally:
        code = server.stop()
    assert code == 0  # a clean shutdown on SIGTERM
    assert len(server.crashes) == 1


def test_a_server_found_dead_at_the_stop_is_a_crash(tmp_path: Path) -> None:
    server = _restartable(tmp_path)
    server.start()
    try:
        assert server._proc is not None
        os.kill(server._proc.pid, signal.SIGSEGV)
        server._proc.wait()
    finally:
        code = server.stop()
    assert code == -signal.SIGSEGV
    assert len(server.crashes) == 1


def test_a_first_start_that_fails_leaves_no_server_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[subprocess.Popen[bytes]] = []

    class Recorded(Restartable):
        def start(self) -> None:
            try:
                super().start()
            finally:
                assert self._proc is not None
                started.append(self._proc)

    monkeypatch.setattr(servers, "_START_SECONDS", 0.0)  # it never gets ready in time
    monkeypatch.setattr(chaos_module, "Restartable", Recorded)
    try:
        with pytest.raises(servers.ServerFailed):
            run_chaos(ChaosSettings(agents=1, intents=1))
        assert len(started) == 1
        assert started[0].poll() is not None  # stopped and reaped, not left in its session
    finally:
        for proc in started:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
