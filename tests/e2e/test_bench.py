"""`slotward bench` run for real, with tiny bounds: what a user reads and parses.

Every subcommand runs on SQLite (``burst``: tests/e2e/test_bench_burst.py);
``throughput --workers 2`` and ``race`` run on the session's PostgreSQL too,
where the benchmark creates its own databases and drops them. Nothing here
asserts a speed: only that the figures are consistent (requests counted,
rate = requests / seconds, p50 <= p90 <= p99), that every scenario is
printed, written and plotted, that the history checker ran on every run and
found nothing, and that a race on a correct server ends with one winner per
slot.
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from slotward.benchmarks.race_plan import TENANT, agents, race_tasks, rephrased
from slotward.benchmarks.waiters import ROUNDS
from tests.e2e.conftest import Server
from tests.pgserver import PgServer

BENCH = [sys.executable, "-m", "slotward.api.cli.main", "bench"]
REQUIRED = ("scenario", "requests", "seconds", "req_per_s", "p50_ms", "p90_ms", "p99_ms",
            "errors", "concurrency", "db", "workers", "client_cpu",
            "server_cpu_us_per_call")  # fmt: skip
# Scenarios whose server is not one the benchmark started (its own receiver's client).
NO_SERVER = {"bare-client"}
PNG = b"\x89PNG\r\n\x1a\n"


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*BENCH, *args], capture_output=True, text=True, timeout=600,
                          check=False)  # fmt: skip


def _measured(done: subprocess.CompletedProcess[str], path: Path) -> dict[str, dict[str, Any]]:
    """The JSON written, by scenario, after checking what every scenario must show."""
    assert done.returncode == 0, done.stdout + done.stderr
    docs = json.loads(path.read_text())
    assert isinstance(docs, list)
    by_name = {d["scenario"]: d for d in docs}
    assert len(by_name) == len(docs)
    lines = done.stdout.splitlines()
    table = lines[2 : lines.index("")]  # after the title and the header, up to the targets
    for doc in docs:
        assert set(REQUIRED) <= doc.keys(), doc
        assert doc["errors"] == 0
        assert doc["seconds"] > 0
        assert doc["req_per_s"] == pytest.approx(doc["requests"] / doc["seconds"], rel=0.01)
        assert 0 < doc["p50_ms"] <= doc["p90_ms"] <= doc["p99_ms"]
        assert doc["client_cpu"] >= 0
        assert sum(doc["statuses"].values()) == doc["requests"]
        row = [line for line in table if line.split()[0] == doc["scenario"]]
        assert len(row) == 1, lines
        assert row[0].split()[1] == str(doc["requests"]), lines
        cpu = doc["server_cpu_us_per_call"]
        if doc["scenario"] in NO_SERVER:
            assert cpu is None, doc
            assert row[0].split()[-1] == "-", lines
        else:  # no server answers a call for free: a 0 here means it was not measured
            assert cpu > 0, doc
            assert row[0].split()[-1] == f"{cpu:,.0f}", lines
    assert len(table) == len(docs)
    assert "targets (ratios measured in this run):" in done.stdout
    return by_name


def test_throughput_on_sqlite_prints_writes_and_plots(tmp_path: Path) -> None:
    out, png = tmp_path / "out.json", tmp_path / "out.png"
    done = _bench("throughput", "--requests", "1000", "--concurrency", "16", "--json", str(out),
                  "--plot", str(png))  # fmt: skip
    found = _measured(done, out)
    assert list(found) == ["creates", "commits", "releases", "reference"]
    assert {d["requests"] for d in found.values()} == {1000}
    # The creates and the reference ran in turns, two slices each (benchmarks/interleave.py).
    assert found["creates"]["slices"] == found["reference"]["slices"] == 2
    assert {(d["db"], d["workers"], d["concurrency"]) for d in found.values()} == {
        ("sqlite", 1, 16)
    }
    assert found["creates"]["statuses"] == {"201": 1000}
    assert found["commits"]["statuses"] == found["releases"]["statuses"] == {"200": 1000}
    creates, reference = found["creates"], found["reference"]
    assert creates["ratio_to_reference"] == pytest.approx(
        creates["req_per_s"] / reference["req_per_s"], rel=0.01)  # fmt: skip
    assert creates["p99_ratio_to_reference"] == pytest.approx(
        creates["p99_ms"] / reference["p99_ms"], rel=0.01)  # fmt: skip
    cpu = creates["server_cpu_us_per_call"] / reference["server_cpu_us_per_call"]
    assert creates["cpu_ratio_to_reference"] == pytest.approx(cpu, rel=0.01)
    said = "SQLite creates at 16 agents (target at 64)"
    assert f"{said}: rate / reference" in done.stdout
    assert f"{said}: server CPU per create / the reference's" in done.stdout
    assert _history(done, "history") > 3 * 1000  # the history checker ran
    assert png.read_bytes().startswith(PNG)


def test_replay_answers_every_duplicate_from_the_ledger(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    done = _bench("replay", "--requests", "200", "--json", str(out))
    found = _measured(done, out)
    assert list(found) == ["creates", "replays"]
    assert found["creates"]["replayed"] == 0
    assert found["replays"]["replayed"] == found["replays"]["requests"] == 200
    assert found["replays"]["ratio_to_fresh"] == pytest.approx(
        found["replays"]["req_per_s"] / found["creates"]["req_per_s"], rel=0.01)  # fmt: skip
    fresh, again = found["creates"], found["replays"]
    assert again["cpu_ratio_to_fresh"] == pytest.approx(
        fresh["server_cpu_us_per_call"] / again["server_cpu_us_per_call"], rel=0.01)  # fmt: skip
    assert _target(done, "replays / fresh creates, rate")[1:] == (">=", "3")
    assert _target(done, "replays / fresh creates, by server CPU")[1:] == (">=", "3")
    assert _history(done, "history") > 2 * 200  # the history checker ran


def _history(done: subprocess.CompletedProcess[str], said: str) -> int:
    """How many calls the history checker's note ``said`` checked, with no violation."""
    notes = [n for n in done.stdout.splitlines() if n.startswith(f"note: {said}: ")]
    assert len(notes) == 1, done.stdout
    assert notes[0].endswith(" 0 violations"), notes
    return int(notes[0].split(": ")[2].split()[0])


def _target(done: subprocess.CompletedProcess[str], name: str) -> tuple[float, str, str]:
    """The measured figure, the comparison and the threshold of the target line ``name``."""
    lines = [line for line in done.stdout.splitlines() if line.strip().startswith(name)]
    assert len(lines) == 1, done.stdout
    measured, sign, threshold = lines[0].split()[-4:-1]
    return float(measured), sign, threshold


def test_baseline_measures_echo_and_reference(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    done = _bench("baseline", "--requests", "200", "--concurrency", "16", "--json", str(out))
    found = _measured(done, out)
    assert list(found) == ["echo", "reference"]
    assert found["echo"]["statuses"] == {"200": 200}
    assert found["reference"]["statuses"] == {"201": 200}
    assert "none for this subcommand" in done.stdout


def test_race_on_sqlite_ends_with_one_winner_per_slot(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    done = _bench("race", "--agents", "60", "--slots", "3", "--json", str(out))
    found = _race(done, out, slots=3)
    assert found["race"]["db"] == "sqlite"


def _race(done: subprocess.CompletedProcess[str], out: Path, slots: int) -> dict[str, Any]:
    found = _measured(done, out)
    assert list(found) == ["race", "uncontended"]
    race = found["race"]
    assert (race["winners"], race["violations"], race["slots"]) == (slots, 0, slots)
    assert race["calls_checked"] > race["requests"]  # the warm-up's creates too
    assert race["statuses"]["409"] > 0  # they really raced
    assert found["uncontended"]["requests"] == race["requests"]
    assert f"race: {slots} winners for {slots} slots" in done.stdout
    return found


def test_scale_reports_each_size_against_the_smallest(tmp_path: Path) -> None:
    out, png = tmp_path / "out.json", tmp_path / "out.png"
    done = _bench("scale", "--sizes", "2000,500", "--requests", "50", "--json", str(out),
                  "--plot", str(png))  # fmt: skip
    found = _measured(done, out)
    assert list(found) == ["claims-500", "claims-2000"]
    assert [d["stored_holds"] for d in found.values()] == [500, 2000]
    assert found["claims-500"]["p50_ratio_to_smallest"] == 1.0
    large, small = found["claims-2000"], found["claims-500"]
    assert large["p99_ratio_to_smallest"] == pytest.approx(
        large["p99_ms"] / small["p99_ms"], rel=0.01)  # fmt: skip
    assert "claim p50 with 2,000 holds / with 500" in done.stdout
    for size in ("500", "2,000"):  # checked against the rows the calls touched, per size
        assert _history(done, f"history ({size} holds)") > 50
    assert png.read_bytes().startswith(PNG)


def _waiters(done: subprocess.CompletedProcess[str], out: Path, waiters: int) -> dict[str, Any]:
    found = _measured(done, out)
    assert list(found) == ["alone", "waiters"]
    alone, crowded = found["alone"], found["waiters"]
    assert alone["statuses"] == crowded["statuses"] == {"201": alone["requests"]}
    assert crowded["waiters"] == waiters
    assert crowded["p99_ratio_to_alone"] == pytest.approx(
        crowded["p99_ms"] / alone["p99_ms"], rel=0.01)  # fmt: skip
    assert f"another tenant's create p99 with {waiters} waiters / without" in done.stdout
    assert f"waiters: {waiters * ROUNDS} in all" in done.stdout  # each answered by its completion
    # Every create, lease, waiter's try and completion.
    assert _history(done, "history") >= 2 * alone["requests"] + waiters * ROUNDS
    return found


def test_waiters_measure_another_tenants_creates_with_and_without_them(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    done = _bench("waiters", "--requests", "80", "--concurrency", "4", "--waiters", "12",
                  "--json", str(out))  # fmt: skip
    assert _waiters(done, out, 12)["alone"]["db"] == "sqlite"


def test_waiters_on_postgresql_with_two_workers(postgres: PgServer, tmp_path: Path) -> None:
    """Waiters and completions land on either worker: a NOTIFY crosses between them."""
    out = tmp_path / "out.json"
    done = _bench("waiters", "--db", postgres.url("postgres"), "--workers", "2",
                  "--requests", "80", "--concurrency", "4", "--waiters", "12",
                  "--json", str(out))  # fmt: skip
    assert _waiters(done, out, 12)["waiters"]["workers"] == 2
    assert _bench_databases(postgres) == []


def _bench_databases(postgres: PgServer) -> list[str]:
    names = postgres.psql("SELECT datname FROM pg_database").split()
    return [n for n in names if n.startswith("slotward_bench")]


def test_throughput_on_postgresql_with_two_workers(postgres: PgServer, tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    done = _bench("throughput", "--db", postgres.url("postgres"), "--workers", "2",
                  "--requests", "100", "--concurrency", "8", "--json", str(out))  # fmt: skip
    found = _measured(done, out)
    assert {(d["db"], d["workers"]) for d in found.values()} == {("postgresql", 2)}
    said = "PostgreSQL creates, 2 worker(s) (target at 2)"
    assert _target(done, f"{said}, 1 tenant: rate / reference")[1:] == (">=", "0.7")
    assert _history(done, "history") > 3 * 100
    assert _bench_databases(postgres) == []  # dropped


def test_race_on_postgresql(postgres: PgServer, tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    url = postgres.url("postgres").replace("+asyncpg", "")  # a plain URL works too
    done = _bench("race", "--db", url, "--agents", "40", "--slots", "3", "--json", str(out))
    assert _race(done, out, slots=3)["race"]["db"] == "postgresql"
    assert _bench_databases(postgres) == []


def test_a_bad_database_is_refused_before_anything_runs() -> None:
    done = _bench("throughput", "--db", "mysql://localhost/x")
    assert done.returncode == 2
    assert "--db must be 'sqlite' or a postgresql:// server URL" in done.stderr


async def test_rephrased_retries_are_replays_of_the_first_call(server: Server) -> None:
    """The race's reworded calls are the same intent to the server: its first answer."""
    at = datetime(2030, 10, 2, 10, 0, tzinfo=UTC)
    for agent in agents(8, 8, seed=5):  # every rewording, one slot each: no conflicts
        client = await server.key(TENANT, f"agent-{agent.index}", priority=agent.priority)
        first = await client.create(race_tasks([agent], at)[0][0][0]["body"])
        again = await client.create(rephrased(agent, at))
        assert (first.status, first.replayed) == (201, False), first.json
        assert (again.status, again.replayed, again.key) == (201, True, first.key)
        assert again.body == first.body
