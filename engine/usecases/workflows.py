"""Use cases of the retry-storm watch, and the workflow view.

A replay costs the caller nothing but a read; the watch counts replays in the
API process by the whole second they were answered in, and hands the counts
over in batches (:func:`record_replays`). The store adds every process's
seconds up, so a storm spread over processes is seen whole, and a batch handed
over late cannot make a storm of replays that were spread out. A workflow is
flagged once per window (:func:`flag_retry_storm`, or the hand-over itself).
:func:`workflow_view` shows one workflow whole.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from slotward.engine.errors import NotFound
from slotward.engine.model import OutboxEvent, Principal, WorkflowStats
from slotward.engine.ports import Clock, IdGenerator, UnitOfWork
from slotward.engine.rules.audit import AuditKey
from slotward.engine.rules.documents import execution_document, hold_document
from slotward.engine.rules.policy import Policy
from slotward.engine.rules.timenorm import format_instant
from slotward.engine.usecases.effects import audit

__all__ = [
    "EXECUTIONS_SHOWN",
    "HOLDS_SHOWN",
    "STORM_ACTION",
    "ReplayCount",
    "ReplayTally",
    "Unflushed",
    "flag_retry_storm",
    "record_replays",
    "storm_key",
    "whole_second",
    "window_start",
    "workflow_view",
]

STORM_ACTION = "workflow.retry_storm"  # the audit action and the outbox event type
STORM_ACTOR = "system"  # as the expiry sweeper's entries
HOLDS_SHOWN = 200  # the view lists at most this many holds, oldest first
EXECUTIONS_SHOWN = 200  # ... and this many executions, oldest first
_SECOND = timedelta(seconds=1)


def whole_second(at: datetime) -> datetime:
    """The whole second ``at`` falls in: the bucket a replay at ``at`` is counted in."""
    return at.replace(microsecond=0)


def window_start(now: datetime, window: timedelta) -> datetime:
    """The oldest second whose replays all happened within ``window`` before ``now``.

    A second counts only when it began after ``now - window``: the count may
    miss up to one second's replays at the window's old edge, never add any.
    """
    return whole_second(now - window) + _SECOND


def storm_key(workflow_id: str) -> str:
    """The audit ``key`` of a storm's entry: never mistaken for an idempotency key."""
    return f"workflow:{workflow_id}"


class ReplayCount(NamedTuple):
    """Replays of one workflow handed over in one batch, by the second they happened.

    A named tuple, not a frozen dataclass: a hand-over makes one for every
    workflow replayed since the last, and a tuple is made for a fifth of the
    cost (docs/performance.md, thirteenth pass).
    """

    seconds: Mapping[datetime, int]  # whole second (UTC) -> replays answered within it
    last_at: datetime  # the latest of them
    older: int = 0  # replays too old for any window: they count in the total only

    @property
    def total(self) -> int:  # not ``count``: a tuple's method of that name
        return self.older + sum(self.seconds.values())


@dataclass(frozen=True)
class ReplayTally:
    """One workflow after a hand-over: its totals and its replays within the window."""

    stats: WorkflowStats
    # Over every process, within the window ending at the hand-over; None when not
    # counted: the workflow's replays in all are fewer than a storm's.
    in_window: int | None
    flagged: bool = False  # this hand-over flagged a retry storm


def record_replays(
    uow: UnitOfWork,
    tenant: str,
    counts: Mapping[str, ReplayCount],
    policy: Policy,
    clock: Clock,
    ids: IdGenerator,
) -> dict[str, ReplayTally]:
    """Add one tenant's batched replay counts in one transaction, and flag storms.

    Each workflow's replays within the window ending now are summed over every
    process's hand-overs by when they happened, not when they were handed
    over; reaching ``policy.storm_replays`` flags the workflow, once per window.
    Seconds older than the window are forgotten, for the whole tenant. Answers
    a tally for each workflow with as many replays in all as a storm's, or a
    storm flag: of the others there is nothing to tell.
    """
    tallies: dict[str, ReplayTally] = {}
    window = policy.storm_window
    with uow:
        uow.lock_tenant(tenant)
        now = clock.now()  # after the lock: every earlier hand-over and flag is visible
        since = window_start(now, window)
        uow.workflows.forget_replays_before(tenant, since)
        latest = whole_second(now)
        totals: dict[str, tuple[int, datetime]] = {}
        recent: dict[str, Mapping[datetime, int]] = {}
        for workflow_id, seen in counts.items():
            totals[workflow_id] = (seen.total, seen.last_at)
            recent[workflow_id] = _recent(seen.seconds, since, latest)
        # Read back only the workflows a storm is possible for, or flagged: the
        # window's replays are some of all the workflow's, so fewer in all than
        # a storm's leaves nothing to count (most workflows: their row not read).
        added = uow.workflows.add_replays(tenant, totals, read_back=policy.storm_replays)
        uow.workflows.add_replay_seconds(tenant, recent)
        for workflow_id in sorted(added):
            stats = added[workflow_id]
            in_window = None
            if stats.replays >= policy.storm_replays:
                in_window = uow.workflows.replays_since(tenant, workflow_id, since)
            flagged = (
                in_window is not None
                and in_window >= policy.storm_replays
                and _flag(uow, tenant, workflow_id, in_window, window, now, ids, policy.audit_key)
            )
            if flagged:  # the flag changed the row
                stats = uow.workflows.get(tenant, workflow_id) or stats
            tallies[workflow_id] = ReplayTally(stats, in_window, flagged)
        uow.commit()
    return tallies


def _recent(
    seconds: Mapping[datetime, int], since: datetime, latest: datetime
) -> Mapping[datetime, int]:
    """``seconds`` from ``since`` on, a second after ``latest`` (a clock ahead of
    ours) counted as ``latest``: most often all of them, as they are."""
    for second in seconds:
        if not since <= second <= latest:
            break
    else:
        return seconds
    recent: dict[datetime, int] = {}
    for second, n in seconds.items():
        if second >= since:
            at = min(second, latest)
            recent[at] = recent.get(at, 0) + n
    return recent


def flag_retry_storm(
    uow: UnitOfWork,
    tenant: str,
    workflow_id: str,
    replays: int,
    window: timedelta,
    clock: Clock,
    ids: IdGenerator,
    *,
    audit_key: AuditKey | None = None,
) -> bool:
    """Flag a retry storm of ``workflow_id``: audit entry, outbox event, stored mark.

    Returns False when the workflow was already flagged within ``window`` (by
    this process or another): a storm that goes on is flagged once per window.
    """
    with uow:
        uow.lock_tenant(tenant)
        now = clock.now()  # after the lock: another process's flag is visible by now
        if not _flag(uow, tenant, workflow_id, replays, window, now, ids, audit_key):
            return False
        uow.commit()
        return True


def _flag(
    uow: UnitOfWork,
    tenant: str,
    workflow_id: str,
    replays: int,
    window: timedelta,
    now: datetime,
    ids: IdGenerator,
    audit_key: AuditKey | None,
) -> bool:
    """Write the flag unless one was stored within ``window``; the caller holds the lock."""
    stats = uow.workflows.get(tenant, workflow_id)
    if stats is not None and stats.storm_at is not None and now - stats.storm_at < window:
        return False
    uow.workflows.mark_storm(tenant, workflow_id, now)
    # The audit entry has no workflow field: its key names the workflow.
    audit(uow, tenant, STORM_ACTOR, now, STORM_ACTION, storm_key(workflow_id), None, "flagged",
          audit_key=audit_key)  # fmt: skip
    payload = {
        "workflow_id": workflow_id,
        "replays": replays,
        "window_seconds": window.total_seconds(),
        "at": format_instant(now),
    }
    uow.outbox.add(OutboxEvent(ids.new_id("evt"), tenant, STORM_ACTION, now, payload))
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
