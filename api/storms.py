"""The retry-storm watch: counts each workflow's replays and flags a storm.

A replay is served from a read, so counting it must not add a write to the
hot path. Each process keeps, per workflow, the times of its latest replays
and a count not yet handed to the store; the sweeper's :meth:`StormWatch.flush`
hands the counts over, one write per tenant. Two ways to flag a storm:

- here: this process alone saw ``storm_replays`` replays within
  ``storm_window``. The flag is written before the replay is answered.
- across processes: at each flush the store answers the workflow's total over
  every process; the rise of that total over the last window (sampled at this
  process's flushes, so it lags by one sweep interval and never overcounts)
  reaching the threshold flags it too.

The stored ``storm_at`` makes the flag once per window whichever process sees
it first. Counts not yet flushed are lost if the process dies: they are
telemetry, not state.
"""

from __future__ import annotations

import logging
from collections import defaultdict, deque
from dataclasses import dataclass, field
from datetime import datetime

from slotward.api.metrics import Metrics
from slotward.engine.errors import SlotwardError
from slotward.engine.model import Reply
from slotward.engine.policy import Policy
from slotward.engine.ports import Clock, IdGenerator, Store
from slotward.engine.workflows import ReplayCount, Unflushed, flag_retry_storm, record_replays

__all__ = ["StormWatch"]

log = logging.getLogger("slotward.storms")

_Key = tuple[str, str]  # (tenant, workflow_id)


@dataclass
class _Watch:
    """What this process knows of one workflow's replays."""

    recent: deque[datetime]  # its latest replays here, at most storm_replays of them
    pending: int = 0  # seen here, not yet handed to the store
    last_at: datetime | None = None  # the latest replay seen here
    flagged_at: datetime | None = None  # when this process last flagged (or tried to)
    # (flush time, stored total over every process): the window's oldest first
    totals: deque[tuple[datetime, int]] = field(default_factory=deque)


class StormWatch:
    """Counts each workflow's replays and flags a workflow whose replays pass a rate."""

    def __init__(
        self, store: Store, clock: Clock, ids: IdGenerator, policy: Policy, metrics: Metrics
    ) -> None:
        self._store = store
        self._clock = clock
        self._ids = ids
        self._threshold = policy.storm_replays
        self._window = policy.storm_window
        self._metrics = metrics
        self._watches: dict[_Key, _Watch] = {}

    async def observe(self, tenant: str, workflow_id: str | None, reply: Reply) -> None:
        """Called after every mutating answer (fresh or replayed); counts the replays."""
        if workflow_id is None or not reply.replayed:
            return
        now = self._clock.now()
        watch = self._watch((tenant, workflow_id))
        watch.pending += 1
        watch.last_at = now
        watch.recent.append(now)
        # ``recent`` keeps the latest storm_replays replays: it is full and its
        # oldest is within the window exactly when the window holds that many.
        if len(watch.recent) == self._threshold and now - watch.recent[0] < self._window:
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

        One write per tenant. Then checks each flushed workflow's total over
        every process, and forgets workflows idle for a whole window.
        """
        now = self._clock.now()
        by_tenant: defaultdict[str, dict[str, ReplayCount]] = defaultdict(dict)
        for (tenant, workflow_id), watch in self._watches.items():
            if watch.pending and watch.last_at is not None:
                by_tenant[tenant][workflow_id] = ReplayCount(watch.pending, watch.last_at)
                # Taken before any await: a flush running meanwhile cannot count them too.
                watch.pending = 0
        for tenant, counts in by_tenant.items():
            await self._flush_tenant(tenant, counts, now)
        self._forget_idle(now)

    async def _flush_tenant(
        self, tenant: str, counts: dict[str, ReplayCount], now: datetime
    ) -> None:
        try:
            totals = await self._store.write(lambda uow: record_replays(uow, tenant, counts))
        except SlotwardError:
            log.warning("could not record replay counts of tenant %s; next flush retries", tenant)
            for workflow_id, seen in counts.items():
                watch = self._watch((tenant, workflow_id))
                watch.pending += seen.count
                watch.last_at = max(seen.last_at, watch.last_at or seen.last_at)
            return
        for workflow_id, stats in totals.items():
            watch = self._watch((tenant, workflow_id))
            rise = self._rise(watch, now, stats.replays, counts[workflow_id].count)
            if rise >= self._threshold:
                await self._flag(tenant, workflow_id, watch, rise, now)

    def _rise(self, watch: _Watch, now: datetime, total: int, added: int) -> int:
        """How much the stored total rose within the window, as far as samples show.

        Only samples taken within the window count, so the answer may fall short
        of the truth (by what other processes flushed before this process's
        oldest sample) but never exceeds it.
        """
        samples = watch.totals
        while samples and now - samples[0][0] >= self._window:
            samples.popleft()
        if not samples:
            samples.append((now, total - added))  # the total just before our hand-over
        samples.append((now, total))
        return total - samples[0][1]

    async def _flag(
        self, tenant: str, workflow_id: str, watch: _Watch, replays: int, now: datetime
    ) -> None:
        if watch.flagged_at is not None and now - watch.flagged_at < self._window:
            return
        watch.flagged_at = now  # before the await: concurrent replays do not flag twice
        window = self._window
        try:
            flagged = await self._store.write(
                lambda uow: flag_retry_storm(
                    uow, tenant, workflow_id, replays, window, self._clock, self._ids
                )
            )
        except SlotwardError:
            # Telemetry must not fail the replay it rides on; a later replay retries.
            watch.flagged_at = None
            log.warning("could not flag the retry storm of %s/%s", tenant, workflow_id)
            return
        if flagged:
            self._metrics.retry_storm()
            log.warning(
                "retry storm: workflow %s of tenant %s replayed %d times within %ss",
                workflow_id, tenant, replays, window.total_seconds(),
            )  # fmt: skip

    def _watch(self, key: _Key) -> _Watch:
        watch = self._watches.get(key)
        if watch is None:
            watch = self._watches[key] = _Watch(deque(maxlen=self._threshold))
        return watch

    def _forget_idle(self, now: datetime) -> None:
        """Drop workflows with nothing to flush and no replay here for a whole window.

        Memory then stays bounded by the workflows replayed within one window.
        A flag stays in the store, so forgetting it here cannot flag twice.
        """
        idle = [
            key
            for key, watch in self._watches.items()
            if watch.pending == 0 and (watch.last_at is None or now - watch.last_at >= self._window)
        ]
        for key in idle:
            del self._watches[key]
