"""Ports of the operational records: the retry-storm watch's counts, and the gauges.

Part of engine/ports.py, which re-exports them.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Protocol

from slotward.engine.model import Gauges, WorkflowStats

__all__ = ["Stats", "Workflows"]


class Workflows(Protocol):
    def get(self, tenant: str, workflow_id: str) -> WorkflowStats | None: ...

    def add_replays(
        self, tenant: str, counts: Mapping[str, tuple[int, datetime]], *, read_back: int = 0
    ) -> dict[str, WorkflowStats]:
        """Add to each workflow of ``counts`` its replays, ``(count, seen up to)``
        (creating rows as needed); the rows after, by workflow: of those whose
        replays in all reach ``read_back``, or that carry a storm flag (0: all)."""
        ...

    def mark_storm(self, tenant: str, workflow_id: str, at: datetime) -> None:
        """Record that a retry storm was flagged at ``at`` (creating the row if needed)."""
        ...

    def add_replay_seconds(
        self, tenant: str, buckets: Mapping[str, Mapping[datetime, int]]
    ) -> None:
        """Add each workflow's replays by the whole second (UTC) they happened in, to
        every process's."""
        ...

    def replays_since(self, tenant: str, workflow_id: str, since: datetime) -> int:
        """The replays of the seconds from ``since`` on, over every process's hand-overs."""
        ...

    def forget_replays_before(self, tenant: str, before: datetime) -> None:
        """Drop the tenant's per-second replay counts of the seconds before ``before``."""
        ...

    def tenant_with_replays_before(self, before: datetime) -> str | None:
        """Some tenant with per-second replay counts older than ``before``, if any."""
        ...

    def busiest(self, tenant: str, limit: int) -> list[WorkflowStats]:
        """The tenant's workflows with the most replays first (then by id), at most ``limit``."""
        ...


class Stats(Protocol):
    def gauges(self, now: datetime) -> Gauges:
        """Whole-store figures, over every tenant."""
        ...
