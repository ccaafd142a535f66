"""Use case: forget idempotency records past their retention time.

A record is kept for the retention time after its last change (default 72 h,
up to 30 days); after that a duplicate executes again. An execution whose
lease is still running is never purged.
"""

from __future__ import annotations

from slotward.engine.ports import Clock, UnitOfWork

__all__ = ["purge_expired"]


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
