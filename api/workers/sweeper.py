"""The background sweeper: marks expired holds and emits ``hold.expired``,
marks expired approvals and emits ``approval.expired``, purges idempotency
records and delivered outbox events past retention, and flushes replay counts.

Reads never depend on it (a held hold past expiry already reads expired and
never blocks); it makes the state and the events catch up.
"""

from __future__ import annotations

import asyncio
import logging

from slotward.api.bootstrap import Services
from slotward.api.waits import wait_name
from slotward.engine.errors import Unavailable
from slotward.engine.usecases.approvals import expire_due_approvals
from slotward.engine.usecases.calendar_writes import purge_written
from slotward.engine.usecases.lifecycle import expire_due
from slotward.engine.usecases.relay import purge_delivered
from slotward.engine.usecases.retention import purge_expired, purge_replay_seconds

__all__ = ["sweep_forever", "sweep_once"]

log = logging.getLogger("slotward.sweeper")


async def sweep_once(svc: Services, batch: int = 500) -> int:
    """Expire everything due now, in batches; return how many holds expired."""
    total = 0
    while True:  # one tenant per transaction, until nothing is due
        n = await svc.store.write(
            lambda uow: expire_due(uow, svc.clock, svc.ids, batch, audit_key=svc.policy.audit_key)
        )
        total += n
        if n == 0:
            break
    key = svc.policy.audit_key
    while expired := await svc.store.write(
        lambda uow: expire_due_approvals(uow, svc.clock, svc.ids, batch, audit_key=key)
    ):
        for approval in expired:  # their waiters may be in other processes
            svc.completions.notify(approval.tenant, wait_name(approval.id))
    while True:
        purged = await svc.store.write(lambda uow: purge_expired(uow, svc.clock, batch))
        svc.metrics.purged(purged)
        if purged == 0:
            break
    retention = svc.policy.retention
    while await svc.store.write(lambda uow: purge_delivered(uow, svc.clock, retention, batch)):
        pass  # delivered events are kept as long as the answers are
    while await svc.store.write(lambda uow: purge_written(uow, svc.clock, retention, batch)):
        pass  # and so are the deletes of holds that are over from the calendars
    window = svc.policy.storm_window
    while await svc.store.write(lambda uow: purge_replay_seconds(uow, svc.clock, window)):
        pass  # one quiet tenant at a time
    await svc.storms.flush()
    return total


async def sweep_forever(svc: Services, interval: float) -> None:
    while True:
        try:
            await sweep_once(svc)
        except Unavailable as busy:  # the store is busy or away: no traceback to read
            log.warning("sweep deferred: %s; trying again next interval", busy)
        except Exception:
            log.exception("sweep failed; trying again next interval")
        await asyncio.sleep(interval)
