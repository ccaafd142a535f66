"""A refusal's alternatives on a calendar full for weeks: the nearest free slots of
the whole horizon, though the search reads outward only as far as they lie."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from slotward.engine.clock import FixedClock
from slotward.engine.errors import SlotConflict
from slotward.engine.fakes import InMemoryUnitOfWork, SequentialIds, State
from slotward.engine.model import Principal
from slotward.engine.rules.attendees import parse_attendees
from slotward.engine.rules.conflicts import find_alternatives
from slotward.engine.rules.policy import Policy
from slotward.engine.rules.timenorm import format_instant, normalize_interval
from slotward.engine.usecases.placing import HoldRequest, place_hold

T0 = datetime(2030, 10, 1, 9, 0, tzinfo=UTC)
FIRST = T0 + timedelta(hours=1)  # the calendar is full from 10:00 on
ALICE = Principal("acme", "agent-alice", "agent", 50)
BOB = Principal("acme", "agent-bob", "agent", 50)
POLICY = Policy()


def _request(principal: Principal, workflow: str, start: datetime, minutes: int) -> HoldRequest:
    return HoldRequest(
        principal=principal, workflow_id=workflow, step=None,
        attendees=parse_attendees(["carol@example.com"]),
        interval=normalize_interval(start=format_instant(start), duration_minutes=minutes),
        title="Busy", description=None, priority=principal.priority, ttl_seconds=3600,
    )  # fmt: skip


def _full_weeks(state: State, clock: FixedClock, ids: SequentialIds) -> None:
    """Twelve-hour holds from 10:00 for three weeks; two of them end early (a free
    half hour on the fifth day, an hour on the twelfth)."""
    start = FIRST
    for k in range(42):
        minutes = {9: 690, 23: 660}.get(k, 720)
        req = _request(ALICE, f"busy-{k}", start, minutes)
        place_hold(InMemoryUnitOfWork(state), req, POLICY, clock, ids)
        start += timedelta(hours=12)


def test_alternatives_weeks_away_are_those_of_the_whole_horizon() -> None:
    state, clock, ids = State(), FixedClock(T0), SequentialIds()
    _full_weeks(state, clock, ids)
    claim = _request(BOB, "wf-bob", FIRST + timedelta(days=8, hours=3), 30)
    with pytest.raises(SlotConflict) as info:
        place_hold(InMemoryUnitOfWork(state), claim, POLICY, clock, ids)
    busy = [(h.start, h.end) for h in state.holds.values()]
    whole = find_alternatives(busy, start=claim.interval.start, duration=timedelta(minutes=30),
                              now=T0, horizon=POLICY.max_window)  # fmt: skip
    found = [(a["start"], a["end"]) for a in info.value.extra["alternatives"]]
    assert found == [(format_instant(s), format_instant(e)) for s, e in whole]
    fifth, twelfth = FIRST + timedelta(hours=12 * 9 + 11.5), FIRST + timedelta(hours=12 * 23 + 11)
    assert [s for s, _ in whole] == [fifth, twelfth, twelfth + timedelta(minutes=30)]
