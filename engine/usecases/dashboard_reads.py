"""Read use cases the dashboard adds: the busiest workflows, the audit chain's head."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from slotward.engine.model import Principal, WorkflowStats
from slotward.engine.ports import UnitOfWork
from slotward.engine.rules.timenorm import format_instant
from slotward.engine.usecases.workflows import Unflushed

__all__ = ["audit_head", "busiest_workflows"]


def busiest_workflows(
    uow: UnitOfWork,
    principal: Principal,
    limit: int,
    unflushed: Callable[[str], Unflushed] | None = None,
) -> dict[str, Any]:
    """The tenant's workflows with the most replays first (then by id), at most ``limit``.

    ``unflushed`` adds the replays this process has seen of a listed workflow
    and not yet handed to the store (as ``GET /v1/workflows/{id}`` does).
    """
    with uow:
        stats = uow.workflows.busiest(principal.tenant, limit)
    rows = [_row(s, unflushed(s.workflow_id) if unflushed else Unflushed()) for s in stats]
    rows.sort(key=lambda r: (-r["replays"], r["workflow_id"]))
    return {"items": rows, "next_cursor": None}


def _row(stats: WorkflowStats, extra: Unflushed) -> dict[str, Any]:
    last = max((t for t in (stats.last_replay_at, extra.last_at) if t is not None), default=None)
    return {
        "workflow_id": stats.workflow_id,
        "replays": stats.replays + extra.count,
        "last_replay_at": None if last is None else format_instant(last),
        "storms": stats.storms,
        "storm_at": None if stats.storm_at is None else format_instant(stats.storm_at),
    }


def audit_head(uow: UnitOfWork, principal: Principal) -> int:
    """The seq of the last entry of the tenant's audit chain (0 when it is empty)."""
    with uow:
        return uow.audit.head(principal.tenant)[0]
