"""The retry-storm watch (being built: issue 4)."""

from __future__ import annotations

from slotward.api.telemetry import Metrics
from slotward.engine.model import Reply
from slotward.engine.policy import Policy
from slotward.engine.ports import Clock, IdGenerator, Store

__all__ = ["StormWatch"]


class StormWatch:
    """Counts each workflow's replays and flags a workflow whose replays pass a rate."""

    def __init__(
        self, store: Store, clock: Clock, ids: IdGenerator, policy: Policy, metrics: Metrics
    ) -> None:
        self._store = store
        self._clock = clock
        self._ids = ids
        self._policy = policy
        self._metrics = metrics

    async def observe(self, tenant: str, workflow_id: str | None, reply: Reply) -> None:
        """Called after every mutating answer (fresh or replayed)."""

    async def flush(self) -> None:
        """Persist the replay counts seen so far (sweeper interval, and at shutdown)."""
