"""The retry-storm watch on the in-memory store: windows, flushes, several processes.

Each :class:`StormWatch` stands for one server process; two of them on one
store are two processes on one database.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import TypeVar

import pytest

from slotward.api.metrics import Metrics
from slotward.api.storms import StormWatch
from slotward.engine.clock import FixedClock
from slotward.engine.errors import NotFound, Unavailable
from slotward.engine.fakes import InMemoryStore, InMemoryUnitOfWork, SequentialIds
from slotward.engine.model import Principal, Reply
from slotward.engine.ports import UnitOfWork
from slotward.engine.rules.audit import GENESIS, verify_chain
from slotward.engine.rules.policy import Policy
from slotward.engine.usecases.retention import purge_replay_seconds
from slotward.engine.usecases.workflows import Unflushed, flag_retry_storm, workflow_view

T0 = datetime(2030, 10, 1, 9, 0, tzinfo=UTC)
WINDOW = timedelta(seconds=10)
POLICY = Policy(storm_replays=3, storm_window=WINDOW)
REPLAY = Reply(created=True, body=b"{}", key="idem_x", replayed=True)
FRESH = Reply(created=True, body=b"{}", key="idem_x", replayed=False)
# The defaults, for the cases of the review: 20 replays per 60 s.
DEFAULTS = Policy(storm_replays=20, storm_window=timedelta(seconds=60))
T = TypeVar("T")


class CountingMetrics(Metrics):
    """The real metrics, read back from their registry."""

    @property
    def storms(self) -> float:
        return self.registry.get_sample_value("slotward_retry_storms_total") or 0.0


@pytest.fixture
def store() -> InMemoryStore:
    return InMemoryStore()


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock(T0)


class FlakyStore(InMemoryStore):
    """The in-memory store, counting write attempts; ``down`` makes every write fail."""

    def __init__(self) -> None:
        super().__init__()
        self.down = False
        self.writes = 0

    async def write(self, fn: Callable[[UnitOfWork], T]) -> T:
        self.writes += 1
        if self.down:
            raise Unavailable("the database is away")
        return await super().write(fn)


def _watch(
    store: InMemoryStore, clock: FixedClock, policy: Policy = POLICY
) -> tuple[StormWatch, CountingMetrics]:
    metrics = CountingMetrics()
    return StormWatch(store, clock, SequentialIds(), policy, metrics), metrics


async def _replays(watch: StormWatch, n: int, workflow: str = "wf", tenant: str = "acme") -> None:
    for _ in range(n):
        await watch.observe(tenant, workflow, REPLAY)


def _storm_types(store: InMemoryStore) -> list[str]:
    return [e.type for e in store.state.outbox if e.type == "workflow.retry_storm"]


async def test_the_threshold_within_the_window_flags_once(
    store: InMemoryStore, clock: FixedClock
) -> None:
    watch, metrics = _watch(store, clock)
    await _replays(watch, 2)
    assert metrics.storms == 0
    await _replays(watch, 1)
    assert metrics.storms == 1
    assert _storm_types(store) == ["workflow.retry_storm"]
    [event] = store.state.outbox
    assert event.payload == {
        "workflow_id": "wf",
        "replays": 3,
        "window_seconds": 10.0,
        "at": "2030-10-01T09:00:00Z",
    }
    await _replays(watch, 10)
    clock.advance(9)
    await _replays(watch, 3)
    assert metrics.storms == 1
    clock.advance(1)  # a full window after the flag
    await _replays(watch, 3)
    assert metrics.storms == 2
    chain = store.state.audit["acme"]
    assert [(e.action, e.key, e.outcome) for e in chain] == [
        ("workflow.retry_storm", "workflow:wf", "flagged")
    ] * 2
    assert verify_chain(chain, (0, GENESIS)).ok


async def test_fresh_answers_and_calls_without_a_workflow_are_not_counted(
    store: InMemoryStore, clock: FixedClock
) -> None:
    watch, metrics = _watch(store, clock)
    for _ in range(5):
        await watch.observe("acme", "wf", FRESH)
        await watch.observe("acme", None, REPLAY)
    assert watch.watched == 0
    await watch.flush()
    assert store.state.workflows == {}
    assert metrics.storms == 0


async def test_replays_spread_wider_than_the_window_are_not_flagged(
    store: InMemoryStore, clock: FixedClock
) -> None:
    watch, metrics = _watch(store, clock)
    for _ in range(20):
        await _replays(watch, 1)
        await watch.flush()
        clock.advance(5)  # 3 replays span exactly 10 s: never 3 within 10 s
    assert metrics.storms == 0
    assert store.state.workflows[("acme", "wf")].replays == 20


async def test_flush_hands_over_counts_and_forgets_idle_workflows(
    store: InMemoryStore, clock: FixedClock
) -> None:
    watch, _ = _watch(store, clock)
    await _replays(watch, 2, "wf-a")
    await _replays(watch, 1, "wf-b", tenant="globex")
    assert watch.unflushed("acme", "wf-a") == Unflushed(2, T0)
    await watch.flush()
    assert watch.unflushed("acme", "wf-a") == Unflushed()
    stats = store.state.workflows
    assert (stats[("acme", "wf-a")].replays, stats[("globex", "wf-b")].replays) == (2, 1)
    assert stats[("acme", "wf-a")].last_replay_at == T0
    assert watch.watched == 2
    clock.advance(WINDOW.total_seconds())
    await watch.flush()
    assert watch.watched == 0  # memory is bounded by the workflows of one window


async def test_a_storm_spread_over_two_processes_is_flagged_once(
    store: InMemoryStore, clock: FixedClock
) -> None:
    one, m1 = _watch(store, clock)
    two, m2 = _watch(store, clock)
    await _replays(one, 1)
    await _replays(two, 1)
    await one.flush()
    await two.flush()
    clock.advance(1)
    await _replays(one, 1)
    await _replays(two, 1)
    await one.flush()  # 3 replays within the window, over both processes
    await two.flush()
    assert (m1.storms, m2.storms) == (1, 0)
    assert len(_storm_types(store)) == 1


async def test_two_processes_each_seeing_a_storm_flag_it_once(
    store: InMemoryStore, clock: FixedClock
) -> None:
    one, m1 = _watch(store, clock)
    two, m2 = _watch(store, clock)
    await _replays(one, 3)
    await _replays(two, 3)
    assert (m1.storms, m2.storms) == (1, 0)
    assert store.state.workflows[("acme", "wf")].storms == 1


async def test_spread_out_replays_handed_over_in_one_late_batch_are_not_flagged(
    store: InMemoryStore, clock: FixedClock
) -> None:
    # 25 replays, one every 8 s (7.5 a minute against 20 a minute), handed over
    # in one batch (a slow sweep, a long purge, the database away meanwhile).
    watch, metrics = _watch(store, clock, DEFAULTS)
    for _ in range(25):
        await _replays(watch, 1)
        clock.advance(8)
    await watch.flush()
    assert metrics.storms == 0
    assert _storm_types(store) == []
    assert store.state.workflows[("acme", "wf")].replays == 25
    # Only the seconds of the last window are kept: 7 replays, 8 s apart.
    assert sorted(store.state.replay_seconds.values()) == [1] * 7


async def test_a_storm_within_one_second_split_over_two_processes_is_flagged_once(
    store: InMemoryStore, clock: FixedClock
) -> None:
    one, m1 = _watch(store, clock, DEFAULTS)
    two, m2 = _watch(store, clock, DEFAULTS)
    for _ in range(10):
        await _replays(one, 1)
        await _replays(two, 1)
        clock.advance(0.09)  # 20 replays within one second, 10 in each process
    await one.flush()
    assert (m1.storms, m2.storms) == (0, 0)
    await two.flush()  # both processes' replays add up, by when they happened
    assert (m1.storms, m2.storms) == (0, 1)
    [event] = store.state.outbox
    assert event.payload["replays"] == 20
    clock.advance(1)
    await _replays(one, 10)
    await _replays(two, 10)
    await one.flush()
    await two.flush()
    assert (m1.storms, m2.storms) == (0, 1)  # once per window
    assert store.state.workflows[("acme", "wf")].storms == 1


async def test_replays_of_a_clock_set_back_count_as_now_not_in_the_future(
    store: InMemoryStore, clock: FixedClock
) -> None:
    # Replays at 09:00:05, then the clock is set back to 09:00:00 before the
    # hand-over: they are kept as 09:00:00's, and leave the window when it does.
    one, m1 = _watch(store, clock)
    two, m2 = _watch(store, clock)
    clock.advance(5)
    await _replays(one, 2)
    clock.set(T0)
    await one.flush()
    assert set(store.state.replay_seconds.values()) == {2}
    assert [k[2] for k in store.state.replay_seconds] == [T0]
    clock.advance(12)  # the window (10 s) now starts at 09:00:03
    await _replays(two, 2)
    await two.flush()  # 2 within the window: kept at 09:00:05, they would make 4
    assert (m1.storms, m2.storms) == (0, 0)
    assert _storm_types(store) == []


async def test_a_failing_store_does_not_make_every_replay_of_a_storm_write(
    clock: FixedClock,
) -> None:
    store = FlakyStore()
    watch, metrics = _watch(store, clock)
    store.down = True
    await _replays(watch, 3)  # the storm: one flag write tried, and it fails
    assert store.writes == 1
    await _replays(watch, 20)
    assert store.writes == 1  # the replay path does not retry before a hand-over
    await watch.flush()  # the hand-over fails too: one write for the tenant
    assert store.writes == 2
    await _replays(watch, 20)
    assert store.writes == 2
    assert watch.unflushed("acme", "wf").count == 43  # nothing lost
    store.down = False
    await watch.flush()  # the hand-over flags the storm itself
    assert (store.writes, metrics.storms) == (3, 1)
    assert store.state.workflows[("acme", "wf")].replays == 43
    await _replays(watch, 20)  # the stored flag is known here: no write within the window
    assert (store.writes, metrics.storms) == (3, 1)
    clock.advance(WINDOW.total_seconds())
    await _replays(watch, 3)
    assert (store.writes, metrics.storms) == (4, 2)


async def test_counts_kept_through_a_long_outage_add_to_the_total_only(
    clock: FixedClock,
) -> None:
    store = FlakyStore()
    watch, metrics = _watch(store, clock)
    await _replays(watch, 2)
    store.down = True
    await watch.flush()
    clock.advance(3 * WINDOW.total_seconds())
    await watch.flush()  # their second fell out of the window: folded into one count
    await _replays(watch, 1)
    store.down = False
    await watch.flush()
    assert metrics.storms == 0  # 2 old replays and a new one are not 3 within a window
    assert store.state.workflows[("acme", "wf")].replays == 3
    assert list(store.state.replay_seconds.values()) == [1]


def test_flagging_again_within_the_window_is_refused(
    store: InMemoryStore, clock: FixedClock
) -> None:

    ids = SequentialIds()

    def flag() -> bool:
        return flag_retry_storm(
            InMemoryUnitOfWork(store.state), "acme", "wf", 3, WINDOW, clock, ids
        )

    assert flag() is True
    clock.advance(9.999)
    assert flag() is False
    clock.advance(0.001)
    assert flag() is True
    assert store.state.workflows[("acme", "wf")].storms == 2


def test_the_view_of_a_workflow_nobody_used_is_not_found(store: InMemoryStore) -> None:

    reader = Principal("acme", "agent", "reviewer", 0)
    uow = InMemoryUnitOfWork(store.state)
    with pytest.raises(NotFound) as caught:
        workflow_view(uow, reader, "wf", T0)
    assert caught.value.code == "workflow_not_found"
    seen = workflow_view(uow, reader, "wf", T0, Unflushed(2, T0))
    assert (seen["replays"], seen["last_activity_at"]) == (2, "2030-10-01T09:00:00Z")


async def test_a_quiet_tenants_replay_seconds_are_purged_by_the_sweep(
    store: InMemoryStore, clock: FixedClock
) -> None:
    watch, _ = _watch(store, clock)
    await _replays(watch, 3, tenant="quiet")
    await watch.flush()
    assert len(store.state.replay_seconds) == 1
    window = POLICY.storm_window
    purge = partial(purge_replay_seconds, clock=clock, window=window)
    assert await store.write(purge) is False  # still inside the window
    clock.advance(window.total_seconds() + 1)
    assert await store.write(purge) is True
    assert store.state.replay_seconds == {}
    assert await store.write(purge) is False
