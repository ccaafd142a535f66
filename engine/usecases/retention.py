"""Use case: forget idempotency records past their retention time.

A record is kept for the retention time after its last change (default 72 h,
up to 30 days); after that a duplicate executes again. An execution whose
lease is still running is never purged.
"""

from __future__ import annotations

from datetime import timedelta

from slotward.engine.ports import Clock, UnitOfWork
from slotward.engine.usecases.workflows import window_start

__all__ = ["purge_expired", "purge_replay_seconds"]


def purge_expired(uow: UnitOfWork, clock: Clock, limit: int = 500) -> int:
    """Delete up to ``limit`` of one tenant's records past retention; return how many.

    The sweeper calls it until it returns 0, one tenant per transaction (as
    ``expire_due``), under the tenant's lock so no writer of the tenant sees a
    record vanish halfway through its transaction.
    """
    with uow:
        tenant = uow.ledger.purgeable_tenant(clock.now())
        if tenant is None:
            return 0
        uow.lock_tenant(tenant)
        purged = uow.ledger.purge(tenant, clock.now(), limit)
        uow.commit()
        return purged


def purge_replay_seconds(uow: UnitOfWork, clock: Clock, window: timedelta) -> bool:
    """Drop one tenant's per-second replay counts that have left the storm window.

    A tenant's own hand-overs prune its counts too; this catches the tenants
    that went quiet. Returns whether there was anything to drop (the sweeper
    calls it until there is not).
    """
    with uow:
        since = window_start(clock.now(), window)
        tenant = uow.workflows.tenant_with_replays_before(since)
        if tenant is None:
            return False
        uow.lock_tenant(tenant)
        uow.workflows.forget_replays_before(tenant, window_start(clock.now(), window))
        uow.commit()
        return True
