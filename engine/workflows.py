"""Use cases of the retry-storm watch, and the workflow view.

A replay costs the caller nothing but a read; the watch counts replays in the
API process and hands the counts over in batches (:func:`record_replays`), and
flags a workflow whose replays pass the rate once per window
(:func:`flag_retry_storm`). :func:`workflow_view` shows one workflow whole.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from slotward.engine.documents import execution_document, hold_document
from slotward.engine.effects import audit
from slotward.engine.errors import NotFound
from slotward.engine.model import OutboxEvent, Principal, WorkflowStats
from slotward.engine.ports import Clock, IdGenerator, UnitOfWork
from slotward.engine.timenorm import format_instant

__all__ = [
    "EXECUTIONS_SHOWN",
    "HOLDS_SHOWN",
    "STORM_ACTION",
    "ReplayCount",
    "Unflushed",
    "flag_retry_storm",
    "record_replays",
    "workflow_view",
]

STORM_ACTION = "workflow.retry_storm"  # the audit action and the outbox event type
STORM_ACTOR = "system"  # as the expiry sweeper's entries
HOLDS_SHOWN = 200  # the view lists at most this many holds, oldest first
EXECUTIONS_SHOWN = 200  # ... and this many executions, oldest first


@dataclass(frozen=True)
class ReplayCount:
    """Replays of one workflow seen since the last hand-over, and the last one's time."""

    count: int
    last_at: datetime


def record_replays(
    uow: UnitOfWork, tenant: str, counts: Mapping[str, ReplayCount]
) -> dict[str, WorkflowStats]:
    """Add one tenant's batched replay counts in one transaction; return the new totals.

    The totals include what every other process handed over before, which is
    how a process sees a storm spread over several processes.
    """
    totals: dict[str, WorkflowStats] = {}
    with uow:
        uow.lock_tenant(tenant)
        for workflow_id, seen in sorted(counts.items()):
            uow.workflows.add_replays(tenant, workflow_id, seen.count, seen.last_at)
            stats = uow.workflows.get(tenant, workflow_id)
            if stats is not None:
                totals[workflow_id] = stats
        uow.commit()
    return totals


def flag_retry_storm(
    uow: UnitOfWork,
    tenant: str,
    workflow_id: str,
    replays: int,
    window: timedelta,
    clock: Clock,
    ids: IdGenerator,
) -> bool:
    """Flag a retry storm of ``workflow_id``: audit entry, outbox event, stored mark.

    Returns False when the workflow was already flagged within ``window`` (by
    this process or another): a storm that goes on is flagged once per window.
    """
    with uow:
        uow.lock_tenant(tenant)
        now = clock.now()  # after the lock: another process's flag is visible by now
        stats = uow.workflows.get(tenant, workflow_id)
        if stats is not None and stats.storm_at is not None and now - stats.storm_at < window:
            return False
        uow.workflows.mark_storm(tenant, workflow_id, now)
        # The audit entry has no workflow field: its key names the workflow.
        audit(uow, tenant, STORM_ACTOR, now, STORM_ACTION, workflow_id, None, "flagged")
        payload = {
            "workflow_id": workflow_id,
            "replays": replays,
            "window_seconds": window.total_seconds(),
            "at": format_instant(now),
        }
        uow.outbox.add(OutboxEvent(ids.new_id("evt"), tenant, STORM_ACTION, now, payload))
        uow.commit()
        return True


@dataclass(frozen=True)
class Unflushed:
    """Replays the calling process has seen but not yet handed over to the store."""

    count: int = 0
    last_at: datetime | None = None


def workflow_view(
    uow: UnitOfWork,
    principal: Principal,
    workflow_id: str,
    now: datetime,
    unflushed: Unflushed | None = None,
) -> dict[str, Any]:
    """One workflow of the caller's tenant: holds, executions, replays, last activity.

    Lists are capped (:data:`HOLDS_SHOWN`, :data:`EXECUTIONS_SHOWN`), oldest
    first; ``GET /v1/holds?workflow_id=`` pages through every hold.
    """
    tenant = principal.tenant
    unflushed = unflushed or Unflushed()
    with uow:
        holds = uow.holds.search(
            tenant, workflow_id=workflow_id, statuses=None, attendee=None, after_id=None,
            limit=HOLDS_SHOWN, now=now,
        )  # fmt: skip
        records = uow.ledger.for_workflow(tenant, workflow_id, EXECUTIONS_SHOWN)
        stats = uow.workflows.get(tenant, workflow_id)
    if not holds and not records and stats is None and unflushed.count == 0:
        raise NotFound(f"no workflow {workflow_id!r}", code="workflow_not_found")
    instants: list[datetime | None] = [unflushed.last_at]
    instants += [h.updated_at for h in holds]
    instants += [t for r in records for t in (r.created_at, r.completed_at)]
    if stats is not None:
        instants.append(stats.last_replay_at)
    return {
        "workflow_id": workflow_id,
        "holds": [hold_document(h, now) for h in holds],
        "executions": [execution_document(r) for r in records],
        "replays": (stats.replays if stats else 0) + unflushed.count,
        "last_activity_at": _latest(instants),
        "retry_storm_at": _instant(stats.storm_at if stats else None),
        "retry_storms": stats.storms if stats else 0,
    }


def _latest(instants: Iterable[datetime | None]) -> str | None:
    known = [i for i in instants if i is not None]
    return format_instant(max(known)) if known else None


def _instant(value: datetime | None) -> str | None:
    return None if value is None else format_instant(value)
