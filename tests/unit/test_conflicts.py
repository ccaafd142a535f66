"""Who gets a contested slot (``decide``) and where else to go (alternatives, free slots)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from slotward.engine.model import Hold, HoldStatus
from slotward.engine.rules.conflicts import (
    Blocked,
    Claim,
    Free,
    PreemptLosers,
    decide,
    find_alternatives,
    free_slots,
    merge_intervals,
)

NOW = datetime(2030, 10, 1, 9, 0, tzinfo=UTC)
TEN = NOW + timedelta(hours=1)
GRID = timedelta(minutes=15)
HORIZON = timedelta(days=14)
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

Span = tuple[datetime, datetime]


def at(minutes: float) -> datetime:
    """``minutes`` after 10:00, the start of the contested slot."""
    return TEN + timedelta(minutes=minutes)


def hold(
    hold_id: str = "hold_a",
    *,
    attendees: tuple[str, ...] = ("bob",),
    start: datetime = TEN,
    end: datetime | None = None,
    priority: int = 50,
    status: HoldStatus = HoldStatus.HELD,
    expires_at: datetime | None = None,
    intent_fp: str = "fp-other",
    agent: str = "agent-x",
    audit_seq: int = 7,
) -> Hold:
    return Hold(
        id=hold_id,
        key=f"idem_{hold_id}",
        tenant="acme",
        workflow_id="wf-other",
        agent_id=agent,
        attendees=attendees,
        start=start,
        end=end or start + timedelta(minutes=30),
        title="Other",
        description=None,
        priority=priority,
        status=status,
        expires_at=expires_at or NOW + timedelta(minutes=5),
        token=1,
        intent_fp=intent_fp,
        created_at=NOW,
        updated_at=NOW,
        audit_seq=audit_seq,
    )


def claim(
    *,
    attendees: tuple[str, ...] = ("bob",),
    start: datetime = TEN,
    minutes: int = 30,
    priority: int = 50,
    intent_fp: str = "fp-claim",
) -> Claim:
    return Claim(attendees, start, start + timedelta(minutes=minutes), priority, intent_fp)


# decide: free


def test_nothing_in_the_way_is_free() -> None:
    assert decide(claim(), [], NOW) == Free()


def test_holds_of_other_attendees_do_not_block() -> None:
    other = hold(attendees=("carol",), priority=100)
    assert decide(claim(attendees=("bob", "dave")), [other], NOW) == Free()


def test_back_to_back_intervals_do_not_conflict() -> None:
    before = hold("hold_before", start=at(-30), end=at(0), priority=100)
    after = hold("hold_after", start=at(30), end=at(60), priority=100)
    committed = hold("hold_c", start=at(30), end=at(45), status=HoldStatus.COMMITTED)
    assert decide(claim(minutes=30), [before, after, committed], NOW) == Free()


def test_expired_holds_do_not_block() -> None:
    swept = hold("hold_swept", status=HoldStatus.EXPIRED, priority=100)
    unswept = hold("hold_unswept", expires_at=NOW - timedelta(seconds=1), priority=100)
    due_now = hold("hold_due", expires_at=NOW, priority=100)
    assert decide(claim(priority=0), [swept, unswept, due_now], NOW) == Free()


def test_released_and_preempted_holds_do_not_block() -> None:
    released = hold("hold_r", status=HoldStatus.RELEASED, priority=100)
    preempted = hold("hold_p", status=HoldStatus.PREEMPTED, priority=100)
    assert decide(claim(priority=0), [released, preempted], NOW) == Free()


# decide: preemption


def test_strictly_higher_priority_preempts_every_held_hold() -> None:
    low = hold("hold_low", priority=10, start=at(-15))
    mid = hold("hold_mid", priority=69, attendees=("bob", "carol"), start=at(15))
    decision = decide(claim(priority=70, attendees=("bob", "carol")), [low, mid], NOW)
    assert decision == PreemptLosers((low, mid))


def test_only_overlapping_holds_are_preempted() -> None:
    inside = hold("hold_in", priority=10)
    beside = hold("hold_beside", priority=10, start=at(30), end=at(60))
    assert decide(claim(priority=70), [inside, beside], NOW) == PreemptLosers((inside,))


# decide: blocked by a held hold


def test_equal_priority_is_blocked() -> None:
    holder = hold(priority=50, expires_at=NOW + timedelta(seconds=90))
    decision = decide(claim(priority=50), [holder], NOW)
    assert isinstance(decision, Blocked)
    assert [c["kind"] for c in decision.conflicts] == ["held"]
    assert decision.retry_after == 90


def test_one_holder_of_equal_priority_blocks_the_whole_claim() -> None:
    low = hold("hold_low", priority=10, expires_at=NOW + timedelta(seconds=30))
    equal = hold("hold_eq", priority=50, start=at(15), expires_at=NOW + timedelta(seconds=20))
    decision = decide(claim(priority=50), [low, equal], NOW)
    assert isinstance(decision, Blocked)
    assert {c["priority"] for c in decision.conflicts} == {10, 50}
    assert decision.retry_after == 30


def test_retry_after_counts_to_the_last_blocker_rounded_up() -> None:
    first = hold("hold_1", expires_at=NOW + timedelta(seconds=12, milliseconds=100))
    last = hold("hold_2", start=at(10), expires_at=NOW + timedelta(seconds=200, microseconds=1))
    decision = decide(claim(), [first, last], NOW)
    assert isinstance(decision, Blocked)
    assert decision.retry_after == 201


def test_retry_after_is_at_least_one_second() -> None:
    almost = hold(expires_at=NOW + timedelta(microseconds=1))
    decision = decide(claim(), [almost], NOW)
    assert isinstance(decision, Blocked)
    assert decision.retry_after == 1


def test_a_held_conflict_describes_its_holder() -> None:
    holder = hold(
        attendees=("bob", "carol", "erin"),
        start=at(-15),
        end=at(15),
        priority=60,
        agent="agent-b",
        audit_seq=12,
        expires_at=NOW + timedelta(minutes=4),
    )
    decision = decide(claim(attendees=("carol", "bob", "dave")), [holder], NOW)
    assert isinstance(decision, Blocked)
    common = {
        "start": "2030-10-01T09:45:00Z",
        "end": "2030-10-01T10:15:00Z",
        "kind": "held",
        "agent": "agent-b",
        "priority": 60,
        "audit_seq": 12,
        "same_intent": False,
        "expires_at": "2030-10-01T09:04:00Z",
    }
    # One conflict per shared attendee, sorted; erin and dave do not meet.
    assert decision.conflicts == ({"attendee": "bob", **common}, {"attendee": "carol", **common})


# decide: committed holds and same intent


def test_a_committed_hold_is_never_preempted() -> None:
    committed = hold(status=HoldStatus.COMMITTED, priority=0)
    decision = decide(claim(priority=100), [committed], NOW)
    assert isinstance(decision, Blocked)
    assert [c["kind"] for c in decision.conflicts] == ["committed"]
    assert "expires_at" not in decision.conflicts[0]
    assert decision.retry_after is None


def test_a_committed_hold_past_its_hold_expiry_still_blocks() -> None:
    committed = hold(status=HoldStatus.COMMITTED, expires_at=NOW - timedelta(hours=1))
    decision = decide(claim(priority=100), [committed], NOW)
    assert isinstance(decision, Blocked)
    assert decision.retry_after is None


def test_a_committed_hold_shields_the_held_ones_beside_it() -> None:
    committed = hold("hold_c", status=HoldStatus.COMMITTED, priority=0)
    held = hold("hold_h", priority=0, start=at(15))
    decision = decide(claim(priority=100), [committed, held], NOW)
    assert isinstance(decision, Blocked)
    assert sorted(c["kind"] for c in decision.conflicts) == ["committed", "held"]
    assert decision.retry_after is None


def test_the_same_intent_from_another_workflow_is_never_preempted() -> None:
    twin = hold("hold_twin", priority=0, intent_fp="fp-claim")
    other = hold("hold_other", priority=0, start=at(15))
    decision = decide(claim(priority=100, intent_fp="fp-claim"), [twin, other], NOW)
    assert isinstance(decision, Blocked)
    flags = {c["start"]: c["same_intent"] for c in decision.conflicts}
    assert flags == {"2030-10-01T10:00:00Z": True, "2030-10-01T10:15:00Z": False}
    assert {c["kind"] for c in decision.conflicts} == {"held"}
    assert decision.retry_after == 300


# find_alternatives: examples


def test_alternatives_are_the_nearest_free_slots_around_the_claim() -> None:
    busy = [(at(0), at(60))]
    found = find_alternatives(busy, start=at(0), duration=timedelta(minutes=30), now=NOW)
    # 09:00 itself is not after now; 09:15 would overlap 09:30.
    assert found == [(at(-30), at(0)), (at(60), at(90)), (at(90), at(120))]


def test_alternatives_respect_count() -> None:
    found = find_alternatives([], start=at(0), duration=GRID, now=NOW, count=1)
    assert found == [(at(0), at(15))]


def test_no_alternatives_when_everything_is_busy() -> None:
    busy = [(NOW - HORIZON, NOW + 3 * HORIZON)]
    assert find_alternatives(busy, start=at(0), duration=GRID, now=NOW) == []


# find_alternatives and free_slots: properties against brute force

MINUTES = st.integers(min_value=-3000, max_value=3000)


def _overlap(a: Span, b: Span) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def _on_grid(t: datetime) -> bool:
    return (t - EPOCH) % GRID == timedelta(0)


def _grid_ceil(t: datetime) -> datetime:
    steps = math.ceil((t - EPOCH) / GRID)
    return EPOCH + steps * GRID


def brute_alternatives(
    busy: Sequence[Span],
    start: datetime,
    duration: timedelta,
    now: datetime,
    count: int,
    horizon: timedelta,
) -> list[Span]:
    candidates = []
    t = _grid_ceil(start - horizon)
    while t <= start + horizon:
        if t > now:
            candidates.append(t)
        t += GRID
    candidates.sort(key=lambda c: (abs(c - start), c))
    chosen: list[Span] = []
    for c in candidates:
        slot = (c, c + duration)
        if not any(_overlap(slot, b) for b in [*busy, *chosen]):
            chosen.append(slot)
            if len(chosen) == count:
                break
    return sorted(chosen)


def brute_free_slots(
    busy: Sequence[Span],
    start: datetime,
    end: datetime,
    duration: timedelta,
    now: datetime,
    count: int,
) -> list[Span]:
    chosen: list[Span] = []
    t = _grid_ceil(start)
    while t + duration <= end and len(chosen) < count:
        slot = (t, t + duration)
        if t > now and not any(_overlap(slot, b) for b in [*busy, *chosen]):
            chosen.append(slot)
        t += GRID
    return chosen


@st.composite
def busy_spans(draw: st.DrawFn, around: datetime) -> list[Span]:
    spans = draw(
        st.lists(
            st.tuples(MINUTES, st.integers(min_value=1, max_value=3000)),
            max_size=10,
        )
    )
    return [(around + timedelta(minutes=s), around + timedelta(minutes=s + n)) for s, n in spans]


@st.composite
def alternative_cases(
    draw: st.DrawFn,
) -> tuple[list[Span], datetime, timedelta, datetime, int, timedelta]:
    start = NOW + timedelta(seconds=draw(st.integers(min_value=0, max_value=7 * 86400)))
    duration = timedelta(minutes=draw(st.integers(min_value=1, max_value=600)))
    now = start - timedelta(seconds=draw(st.integers(min_value=-6 * 3600, max_value=3 * 86400)))
    count = draw(st.integers(min_value=1, max_value=5))
    # The default window, and a narrow one that can run out of slots.
    horizon = draw(st.sampled_from([HORIZON, timedelta(hours=3)]))
    return draw(busy_spans(start)), start, duration, now, count, horizon


@settings(max_examples=150, deadline=None)
@given(alternative_cases())
def test_find_alternatives_properties(
    case: tuple[list[Span], datetime, timedelta, datetime, int, timedelta],
) -> None:
    busy, start, duration, now, count, horizon = case
    found = find_alternatives(
        busy, start=start, duration=duration, now=now, count=count, horizon=horizon
    )
    assert len(found) <= count
    assert found == sorted(found)
    for i, slot in enumerate(found):
        s, e = slot
        assert e - s == duration
        assert _on_grid(s)
        assert s > now
        assert abs(s - start) <= horizon
        assert not any(_overlap(slot, b) for b in busy)
        assert not any(_overlap(slot, other) for other in found[i + 1 :])
    assert found == brute_alternatives(busy, start, duration, now, count, horizon)


@st.composite
def free_slot_cases(
    draw: st.DrawFn,
) -> tuple[list[Span], datetime, datetime, timedelta, datetime, int]:
    start = NOW + timedelta(seconds=draw(st.integers(min_value=0, max_value=2 * 86400)))
    end = start + timedelta(minutes=draw(st.integers(min_value=1, max_value=3 * 1440)))
    duration = timedelta(minutes=draw(st.integers(min_value=1, max_value=600)))
    now = start - timedelta(seconds=draw(st.integers(min_value=-86400, max_value=86400)))
    count = draw(st.integers(min_value=1, max_value=8))
    return draw(busy_spans(start)), start, end, duration, now, count


@settings(max_examples=150, deadline=None)
@given(free_slot_cases())
def test_free_slots_properties(
    case: tuple[list[Span], datetime, datetime, timedelta, datetime, int],
) -> None:
    busy, start, end, duration, now, count = case
    found = free_slots(busy, start=start, end=end, duration=duration, now=now, count=count)
    assert len(found) <= count
    assert found == sorted(found)
    for i, slot in enumerate(found):
        s, e = slot
        assert e - s == duration
        assert _on_grid(s)
        assert s > now
        assert start <= s
        assert e <= end
        assert not any(_overlap(slot, b) for b in busy)
        assert not any(_overlap(slot, other) for other in found[i + 1 :])
    assert found == brute_free_slots(busy, start, end, duration, now, count)


def test_free_slots_example() -> None:
    busy = [(at(0), at(40))]
    found = free_slots(
        busy, start=at(-30), end=at(120), duration=timedelta(minutes=30), now=NOW, count=3
    )
    assert found == [(at(-30), at(0)), (at(45), at(75)), (at(75), at(105))]


# merge_intervals


@settings(max_examples=150, deadline=None)
@given(busy_spans(NOW))
def test_merge_intervals_covers_the_same_time_with_disjoint_spans(spans: list[Span]) -> None:
    merged = merge_intervals(spans)
    assert merged == sorted(merged)
    for (_, e1), (s2, _) in itertools.pairwise(merged):
        assert e1 < s2  # touching spans are merged too
    for s, e in spans:
        assert any(ms <= s and e <= me for ms, me in merged)
    # Every merged span is a union of input spans: its ends are input ends.
    starts, ends = {s for s, _ in spans}, {e for _, e in spans}
    for ms, me in merged:
        assert ms in starts
        assert me in ends


def test_merge_intervals_joins_touching_spans() -> None:
    assert merge_intervals([(at(30), at(60)), (at(0), at(30))]) == [(at(0), at(60))]
