"""The retry-storm watch (being built: issue 4)."""

from __future__ import annotations

from slotward.engine.model import Reply

__all__ = ["StormWatch"]


class StormWatch:
    """Counts each workflow's replays and flags a workflow whose replays pass a rate."""

    async def observe(self, tenant: str, workflow_id: str | None, reply: Reply) -> None:
        """Called after every mutating answer (fresh or replayed)."""

    async def flush(self) -> None:
        """Persist the replay counts seen so far (sweeper interval, and at shutdown)."""
