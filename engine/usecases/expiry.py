"""Marking holds expired: by the sweeper, or by a claim that needs their slot.

A held hold past its expiry never blocks anyone, but until it is marked its
row still counts as active. A claim (or a late commit) that is about to occupy
an overlapping slot marks such holds expired in its own transaction, so the
store's second line of defence (an exclusion constraint over active rows on
PostgreSQL) never sees two active rows overlap.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

from slotward.engine.model import Hold
from slotward.engine.ports import IdGenerator, UnitOfWork
from slotward.engine.rules.audit import AuditKey
from slotward.engine.rules.holds import Expire, apply
from slotward.engine.usecases.effects import audit, emit

__all__ = ["expire_hold", "expire_stale"]

_EXPIRE = Expire()


def expire_hold(
    uow: UnitOfWork, hold: Hold, now: datetime, ids: IdGenerator, *, audit_key: AuditKey | None
) -> None:
    moved, changed = apply(hold, _EXPIRE, now)
    if changed:
        uow.lock_attendees(hold.tenant, hold.attendees)  # all of them: it frees them all
        uow.holds.save(moved)
        audit(uow, hold.tenant, "system", now, "hold.expire", None, hold.id, "expired",
              audit_key=audit_key)  # fmt: skip
        emit(uow, ids, moved, "hold.expired", now)


def expire_stale(
    uow: UnitOfWork,
    tenant: str,
    attendees: Collection[str],
    interval: tuple[datetime, datetime],
    now: datetime,
    ids: IdGenerator,
    *,
    keep: str | None = None,
    audit_key: AuditKey | None,
) -> None:
    """Expire the unswept, past-expiry holds overlapping ``interval`` (but ``keep``)."""
    for hold in uow.holds.stale(tenant, attendees, interval[0], interval[1], now):
        if hold.id != keep:
            expire_hold(uow, hold, now, ids, audit_key=audit_key)
