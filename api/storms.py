"""The retry-storm watch: counts each workflow's replays and flags a storm.

A replay is served from a read, so counting it must not add a write to the
hot path. Each process keeps, per workflow, the times of its latest replays
and its replays not yet handed to the store, by the whole second they were
answered in; the sweeper's :meth:`StormWatch.flush` hands them over, one write
per tenant. Two ways to flag a storm:

- here: this process alone saw ``storm_replays`` replays within
  ``storm_window``. The flag is written before the replay is answered.
- at a hand-over: the store adds up every process's replays by the second
  they happened, and a workflow whose replays within the window ending now
  reach the threshold is flagged in the same transaction. A batch handed over
  late cannot make a storm of replays that were spread out, and a storm split
  over processes adds up.

The stored ``storm_at`` makes the flag once per window whichever process sees
it first. Counts not yet flushed are lost if the process dies: they are
telemetry, not state.
"""

from __future__ import annotations

import logging
from collections import defaultdict, deque
from datetime import datetime

from slotward.api.metrics import Metrics
from slotward.engine.errors import SlotwardError
from slotward.engine.model import Reply
from slotward.engine.ports import Clock, IdGenerator, Store
from slotward.engine.rules.policy import Policy
from slotward.engine.usecases.workflows import (
    ReplayCount,
    ReplayTally,
    Unflushed,
    flag_retry_storm,
    record_replays,
    whole_second,
    window_start,
)

__all__ = ["StormWatch"]

log = logging.getLogger("slotward.storms")

_Key = tuple[str, str]  # (tenant, workflow_id)


class _Watch:
    """What this process knows of one workflow's replays.

    A plain class with slots, not a dataclass: one is made for every workflow
    replayed, and most are replayed once (docs/performance.md, thirteenth pass).
    """

    __slots__ = ("flagged_at", "held_back", "last_at", "older", "recent", "seconds")

    def __init__(self, threshold: int) -> None:
        self.recent: deque[datetime] = deque(maxlen=threshold)  # its latest replays here
        # Seen here, not yet handed to the store: by whole second, and those too
        # old for any window still to come (after a failed hand-over), which only
        # add to the total. Memory stays at most one window of seconds per workflow.
        self.seconds: dict[datetime, int] = {}
        self.older = 0
        self.last_at: datetime | None = None  # the latest replay seen here
        self.flagged_at: datetime | None = None  # the latest flag known (ours, tried, or stored)
        self.held_back = False  # a flag write failed: no retry from replays before a hand-over

    @property
    def pending(self) -> int:
        return self.older + sum(self.seconds.values())


class StormWatch:
    """Counts each workflow's replays and flags a workflow whose replays pass a rate."""

    def __init__(
        self, store: Store, clock: Clock, ids: IdGenerator, policy: Policy, metrics: Metrics
    ) -> None:
        self._store = store
        self._clock = clock
        self._ids = ids
        self._policy = policy
        self._threshold = policy.storm_replays
        self._window = policy.storm_window
        self._metrics = metrics
        # In the order they were last replayed here, the longest idle first.
        self._watches: dict[_Key, _Watch] = {}
        self._pending: set[_Key] = set()  # the workflows with replays to hand over

    async def observe(self, tenant: str, workflow_id: str | None, reply: Reply) -> None:
        """Called after every mutating answer (fresh or replayed); counts the replays."""
        if workflow_id is None or not reply.replayed:
            return
        now = self._clock.now()
        key = (tenant, workflow_id)
        watches = self._watches
        watch = watches.pop(key, None) or _Watch(self._threshold)
        watches[key] = watch  # the latest replayed last: the idle are found first
        self._pending.add(key)
        second = whole_second(now)
        seconds = watch.seconds
        seconds[second] = seconds.get(second, 0) + 1
        watch.last_at = now
        recent = watch.recent
        recent.append(now)
        # ``recent`` keeps the latest storm_replays replays: it is full and its
        # oldest is within the window exactly when the window holds that many.
        if len(recent) == self._threshold and now - recent[0] < self._window:
            await self._flag(tenant, workflow_id, watch, self._threshold, now)

    @property
    def watched(self) -> int:
        """How many workflows this process keeps a window of (they are forgotten when idle)."""
        return len(self._watches)

    def unflushed(self, tenant: str, workflow_id: str) -> Unflushed:
        """The replays of the workflow this process has seen since its last flush."""
        watch = self._watches.get((tenant, workflow_id))
        if watch is None or watch.pending == 0:
            return Unflushed()
        return Unflushed(watch.pending, watch.last_at)

    async def flush(self) -> None:
        """Hand the counts seen so far to the store (sweeper interval, and at shutdown).

        One write per tenant, which also flags the workflows whose replays over
        every process reach the threshold within the window ending now. Then
        forgets workflows idle for a whole window.
        """
        now = self._clock.now()
        by_tenant: defaultdict[str, dict[str, ReplayCount]] = defaultdict(dict)
        pending, self._pending = self._pending, set()  # not every workflow watched: these
        watches = self._watches
        for key in pending:
            watch = watches.get(key)
            # Replays to hand over: a second's count or ``older`` is never 0 when kept.
            if watch is not None and (watch.seconds or watch.older) and watch.last_at is not None:
                by_tenant[key[0]][key[1]] = ReplayCount(watch.seconds, watch.last_at, watch.older)
                # Taken before any await: a flush running meanwhile cannot count them too.
                watch.seconds, watch.older = {}, 0
        for tenant, counts in by_tenant.items():
            await self._flush_tenant(tenant, counts, now)
        self._forget_idle(now)

    async def _flush_tenant(
        self, tenant: str, counts: dict[str, ReplayCount], now: datetime
    ) -> None:
        policy, clock, ids = self._policy, self._clock, self._ids
        try:
            tallies = await self._store.write(
                lambda uow: record_replays(uow, tenant, counts, policy, clock, ids)
            )
        except SlotwardError:
            log.warning("could not record replay counts of tenant %s; next flush retries", tenant)
            cut = window_start(now, self._window)
            for workflow_id, seen in counts.items():
                self._put_back(self._watch((tenant, workflow_id)), seen, cut)
                self._pending.add((tenant, workflow_id))
            return
        for workflow_id in counts:
            watch = self._watches.get((tenant, workflow_id))
            if watch is not None:
                watch.held_back = False  # the hand-over has decided over these replays
        for workflow_id, tally in tallies.items():
            self._learn(tenant, workflow_id, tally)

    def _learn(self, tenant: str, workflow_id: str, tally: ReplayTally) -> None:
        """Take in what a hand-over answered: the stored flag, and whether it flagged."""
        watch = self._watch((tenant, workflow_id))
        stored = tally.stats.storm_at
        if stored is not None and (watch.flagged_at is None or stored > watch.flagged_at):
            watch.flagged_at = stored  # another process's flag: replays here need not try
        if tally.flagged and tally.in_window is not None:  # counted: it flagged
            self._flagged(tenant, workflow_id, tally.in_window)

    @staticmethod
    def _put_back(watch: _Watch, seen: ReplayCount, cut: datetime) -> None:
        """Return counts a failed hand-over took; seconds gone from the window fold away."""
        for second, count in seen.seconds.items():
            if second >= cut:
                watch.seconds[second] = watch.seconds.get(second, 0) + count
            else:
                watch.older += count
        watch.older += seen.older
        watch.last_at = max(seen.last_at, watch.last_at or seen.last_at)

    async def _flag(
        self, tenant: str, workflow_id: str, watch: _Watch, replays: int, now: datetime
    ) -> None:
        if watch.held_back:
            return
        if watch.flagged_at is not None and now - watch.flagged_at < self._window:
            return
        before, watch.flagged_at = watch.flagged_at, now  # before the await: flag once
        window, key = self._window, self._policy.audit_key
        try:
            flagged = await self._store.write(
                lambda uow: flag_retry_storm(
                    uow, tenant, workflow_id, replays, window, self._clock, self._ids, audit_key=key
                )
            )
        except SlotwardError:
            # Telemetry must not fail the replay it rides on, nor slow every later
            # replay of the storm with a write the store cannot take now: the next
            # hand-over decides over these replays instead.
            if watch.flagged_at == now:
                watch.flagged_at = before
            watch.held_back = True
            log.warning("could not flag the retry storm of %s/%s", tenant, workflow_id)
            return
        if flagged:
            self._flagged(tenant, workflow_id, replays)

    def _flagged(self, tenant: str, workflow_id: str, replays: int) -> None:
        self._metrics.retry_storm()
        log.warning(
            "retry storm: workflow %s of tenant %s replayed %d times within %ss",
            workflow_id, tenant, replays, self._window.total_seconds(),
        )  # fmt: skip

    def _watch(self, key: _Key) -> _Watch:
        watch = self._watches.get(key)
        if watch is None:
            watch = self._watches[key] = _Watch(self._threshold)
        return watch

    def _forget_idle(self, now: datetime) -> None:
        """Drop workflows with nothing to flush and no replay here for a whole window.

        Memory then stays bounded by the workflows replayed within one window.
        A flag stays in the store, so forgetting it here cannot flag twice. The
        watches are in the order of their latest replay here, so the look stops
        at the first one replayed within the window: a flush does not read every
        workflow watched.
        """
        idle = []
        for key, watch in self._watches.items():
            if watch.last_at is not None and now - watch.last_at < self._window:
                break  # this one and every later one were replayed within the window
            if watch.pending == 0:
                idle.append(key)
        for key in idle:
            del self._watches[key]
