"""`slotward bench conflicts` run for real, with tiny bounds.

Nothing here asserts a speed: only that both scenarios are measured and
consistent, that every refusal is a 409 ``slot_conflict`` naming what it met
and where else to go (none a replay), that the ratios are the figures'
ratios, and that the history checker found nothing wrong.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from slotward.benchmarks.conflicts import SLOT, SLOTS, busy_day, refused_claims
from tests.e2e.test_bench import _bench, _measured
from tests.pgserver import PgServer

DAY = datetime(2030, 10, 2, 8, 0, tzinfo=UTC)  # the calendars' shape does not depend on it


def _conflicts(out: Path, *args: str) -> dict[str, dict[str, Any]]:
    done = _bench("conflicts", "--requests", "120", "--concurrency", "8", "--json", str(out),
                  *args)  # fmt: skip
    found = _measured(done, out)
    assert list(found) == ["creates", "conflicts"]
    fresh, refused = found["creates"], found["conflicts"]
    assert fresh["statuses"] == {"201": 120}
    assert refused["statuses"] == {"409": 120}
    assert refused["codes"] == {"slot_conflict": 120}
    assert fresh["replayed"] == refused["replayed"] == 0
    assert isinstance(refused["conflicts_per_refusal"], float)
    assert refused["conflicts_per_refusal"] >= 1
    assert refused["cpu_ratio_to_create"] == pytest.approx(
        refused["server_cpu_us_per_call"] / fresh["server_cpu_us_per_call"], rel=0.01
    )
    assert refused["p50_ratio_to_create"] == pytest.approx(
        refused["p50_ms"] / fresh["p50_ms"], rel=0.01
    )
    assert "conflict / fresh create, server CPU per call" in done.stdout
    assert "conflict / fresh create, p50 latency" in done.stdout
    assert "0 violations" in done.stdout  # the history checker ran
    return found


def test_conflicts_on_sqlite_are_refused_with_alternatives(tmp_path: Path) -> None:
    found = _conflicts(tmp_path / "out.json")
    assert {(d["db"], d["workers"]) for d in found.values()} == {("sqlite", 1)}
    attendees, _ = refused_claims(120, DAY, 8)
    assert found["conflicts"]["contested_attendees"] == attendees
    assert found["conflicts"]["seeded_holds"] == len(busy_day(attendees, DAY, 8)[0])


def test_conflicts_on_postgresql_with_two_workers(postgres: PgServer, tmp_path: Path) -> None:
    found = _conflicts(tmp_path / "out.json", "--db", postgres.url("postgres"), "--workers", "2")
    assert {(d["db"], d["workers"]) for d in found.values()} == {("postgresql", 2)}


def _at(text: str) -> datetime:
    return datetime.fromisoformat(text)


def test_each_refused_claim_is_an_intent_of_its_own_on_a_full_calendar() -> None:
    attendees, claims = refused_claims(300, DAY, 8)
    seeds, commits = busy_day(attendees, DAY, 8)
    intents = {(c["body"]["attendees"][0], c["body"]["start"]) for c in claims}
    assert len(intents) == len({c["body"]["workflow_id"] for c in claims}) == len(claims) == 300
    busy: dict[str, list[datetime]] = {}
    for seed in seeds:
        busy.setdefault(seed["body"]["attendees"][0], []).append(_at(seed["body"]["start"]))
    assert set(busy) == {a for a, _ in intents}
    assert len(busy) == attendees
    for starts in busy.values():  # a day of half hours, a few of them free
        assert SLOTS - 6 <= len(starts) < SLOTS
    for attendee, start in intents:  # each claim meets a seeded hold
        assert any(abs(_at(start) - s) < SLOT for s in busy[attendee])
    assert len(commits) == len(seeds) // 2
