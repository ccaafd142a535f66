"""The chaos report (benchmarks/chaos_report.py) holds what each agent believes against
the store: a refused intent that still holds a hold, and a server that crashed, are
violations."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from slotward.benchmarks.chaos_agents import Track
from slotward.benchmarks.chaos_faults import TENANT, make_plan
from slotward.benchmarks.chaos_report import KEYS, summarize
from slotward.engine.model import Hold, HoldStatus
from slotward.testing import Snapshot

NOW = datetime.now(UTC)
INTENT = make_plan(1, 1, seed=0)[0].intents[0]


def _hold(status: HoldStatus, workflow: str = INTENT.workflow) -> Hold:
    at = NOW + timedelta(days=2)
    return Hold(id="hold_1", key="k", tenant=TENANT, workflow_id=workflow, agent_id="agent-0",
                attendees=("att_x",), start=at, end=at + timedelta(minutes=30), title="t",
                description=None, priority=50, status=status,
                expires_at=NOW + timedelta(hours=1), token=1, intent_fp="fp", created_at=NOW,
                updated_at=NOW, audit_seq=1)  # fmt: skip


def _summary(holds: tuple[Hold, ...], **extra: Any) -> tuple[dict[str, Any], list[str]]:
    track = Track(INTENT, outcome="refused", reason="slot_conflict")
    args: dict[str, Any] = {"history": [], "server_errors": 0, "calls": 0, "kills": 0,
                            "seconds": 0.0, "settings": {}} | extra  # fmt: skip
    return summarize([track], Snapshot(holds=holds), NOW, tenant=TENANT, **args)


@pytest.mark.parametrize("status", [HoldStatus.HELD, HoldStatus.COMMITTED])
def test_a_refused_intent_holding_a_live_or_committed_hold_is_a_violation(
    status: HoldStatus,
) -> None:
    report, problems = _summary((_hold(status),))
    assert report["ok"] is False
    assert any("refused" in p and "hold_1" in p for p in problems), problems


@pytest.mark.parametrize("status", [HoldStatus.PREEMPTED, HoldStatus.RELEASED])
def test_a_refused_intent_whose_holds_are_gone_is_no_violation(status: HoldStatus) -> None:
    report, problems = _summary((_hold(status), _hold(HoldStatus.HELD, workflow="chaos-9-9")))
    assert (report["ok"], problems) == (True, [])


def test_a_server_crash_is_a_violation_in_the_table_and_the_json() -> None:
    assert "server_crashes" in KEYS
    report, problems = _summary((), server_crashes=["exited with -11 before a kill"])
    assert report["server_crashes"] == 1
    assert report["ok"] is False
    assert any("-11" in p for p in problems), problems
    report, problems = _summary(())
    assert (report["server_crashes"], report["ok"]) == (0, True)
