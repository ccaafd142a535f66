"""What `slotward bench` computes and prints, without servers: figures, targets, plans."""

from __future__ import annotations

import io
import itertools
import json
import math
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from slotward.benchmarks.loadgen import PlanError, run_plan
from slotward.benchmarks.race_plan import agents, race_tasks, rephrased
from slotward.benchmarks.report import print_outcome, table, write_json
from slotward.benchmarks.results import Outcome, Result, Settings, Target, db_kind, percentile
from slotward.engine.rules.attendees import parse_attendees
from slotward.testing.history_makers import requested_interval

AT = datetime(2030, 10, 2, 10, 0, tzinfo=UTC)


def _phase(requests: int = 200, seconds: float = 2.0, **changes: Any) -> dict[str, Any]:
    latencies = [float(i) for i in range(1, requests + 1)]
    base = {"requests": requests, "seconds": seconds, "errors": 0, "cpu_seconds": 0.5,
            "latencies_ms": latencies, "statuses": {"201": requests}, "replayed": 0,
            "codes": {}, "error_samples": [], "stopped_early": False}  # fmt: skip
    return base | changes


def test_percentiles_are_nearest_rank() -> None:
    values = [float(i) for i in range(1, 101)]
    assert (percentile(values, 0.5), percentile(values, 0.9), percentile(values, 0.99)) == (
        50.0, 90.0, 99.0)  # fmt: skip
    assert percentile([7.0], 0.99) == 7.0
    assert percentile([], 0.5) == 0.0


def test_a_result_is_requests_over_seconds() -> None:
    result = Result.of("creates", _phase(), Settings(workers=2), concurrency=16)
    assert (result.requests, result.seconds, result.req_per_s) == (200, 2.0, 100.0)
    assert (result.p50_ms, result.p90_ms, result.p99_ms) == (100.0, 180.0, 198.0)
    assert result.client_cpu == 0.25
    assert (result.db, result.workers, result.concurrency) == ("sqlite", 2, 16)
    assert result.server_cpu_us_per_call is None  # no server named: not measured


def test_server_cpu_is_reported_per_call_in_the_table_and_the_json(tmp_path: Path) -> None:
    result = Result.of("creates", _phase(server_cpu_seconds=0.5), Settings(), concurrency=16)
    assert result.server_cpu_us_per_call == 2500.0  # 0.5 s over 200 calls
    outcome = Outcome("throughput", Settings(), results=[result])
    header, row = table(outcome.results)
    assert header.split()[-2:] == [
        "us/call",
    ] or header.endswith("server us/call")
    assert row.split()[-1] == "2,500"
    write_json(outcome, tmp_path / "out.json")
    assert json.loads((tmp_path / "out.json").read_text())[0]["server_cpu_us_per_call"] == 2500.0


def test_targets_compare_each_way() -> None:
    assert Target("rate", 0.6, 0.5, at_least=True).met
    assert not Target("rate", 0.4, 0.5, at_least=True).met
    assert Target("p99", 2.9, 3.0, at_least=False).met
    assert not Target("p99", 3.1, 3.0, at_least=False).met
    assert not Target("p99", math.nan, 3.0, at_least=False).met


def test_errors_are_problems_and_a_time_bound_is_a_note() -> None:
    outcome = Outcome("throughput", Settings())
    phase = _phase(errors=2, error_samples=["POST /v1/holds: 503"], stopped_early=True)
    outcome.add(Result.of("creates", phase, outcome.settings, 64), phase)
    assert outcome.problems == ["creates: 2 calls failed (POST /v1/holds: 503)"]
    assert outcome.notes == ["creates: stopped at the time bound after 200 requests"]


def test_the_report_prints_every_scenario_and_target(tmp_path: Path) -> None:
    outcome = Outcome("throughput", Settings())
    for name in ("creates", "reference"):
        outcome.add(Result.of(name, _phase(), outcome.settings, 64), _phase())
    outcome.results[0].extra["ratio_to_reference"] = 0.8
    outcome.targets.append(Target("creates / reference", 0.8, 0.5, at_least=True))
    outcome.targets.append(Target("p99 / reference", 3.5, 3.0, at_least=False))
    out = io.StringIO()
    print_outcome(outcome, out)
    text = out.getvalue()
    lines = table(outcome.results)
    assert lines[0].split()[:2] == ["scenario", "requests"]
    assert [line.split()[0] for line in lines[1:]] == ["creates", "reference"]
    assert all(line in text for line in lines)
    assert "creates / reference      0.80  >= 0.5    met" in text
    assert "p99 / reference          3.50  <= 3      missed" in text
    write_json(outcome, tmp_path / "out.json")
    written = json.loads((tmp_path / "out.json").read_text())
    assert [d["scenario"] for d in written] == ["creates", "reference"]
    assert written[0]["ratio_to_reference"] == 0.8  # ratios sit beside the fields


def test_db_values() -> None:
    assert db_kind("sqlite") == "sqlite"
    assert db_kind("sqlite+aiosqlite:///x.db") == "sqlite"
    assert db_kind("postgresql://u@h/db") == db_kind("postgres://u@h/db") == "postgresql"
    with pytest.raises(ValueError, match="--db must be"):
        db_kind("mysql://u@h/db")


async def test_the_load_generator_calls_only_loopback() -> None:
    plan = {"phases": [{"name": "x", "base": "http://example.com:80", "tasks": []}]}
    with pytest.raises(PlanError, match="loopback"):
        await run_plan(plan)


def test_race_claims_of_a_slot_all_overlap_and_priorities_stay_below_the_key() -> None:
    racers = agents(200, 7, seed=3)
    tasks = race_tasks(racers, AT)
    assert {r.slot for r in racers} == set(range(7))
    for slot in range(7):
        asked = [
            requested_interval(task[0][0]["body"])
            for task, r in zip(tasks, racers, strict=True)
            if r.slot == slot
        ]
        assert None not in asked
        for a, b in itertools.combinations(asked, 2):
            assert a is not None
            assert b is not None
            assert a[0] < b[1]
            assert b[0] < a[1]
    for task, agent in zip(tasks, racers, strict=True):
        body = task[0][0]["body"]
        assert body.get("priority", agent.priority) <= agent.priority


def test_a_rephrased_retry_asks_for_the_same_attendee_and_interval() -> None:
    """The same intent in other words (the e2e test sends them to a real server)."""
    for agent in agents(8, 2, seed=1):  # every rewording variant
        original = race_tasks([agent], AT)[0][0][0]["body"]
        again = rephrased(agent, AT)
        assert again != original
        assert requested_interval(again) == requested_interval(original)
        said = [(a.kind, a.value) for a in parse_attendees(again["attendees"])]
        assert said == [(a.kind, a.value) for a in parse_attendees(original["attendees"])]
        assert again["workflow_id"] == original["workflow_id"]
        assert again.get("step") == original.get("step")
