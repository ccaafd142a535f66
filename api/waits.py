"""What the waiters' fallback look reads (api/completions.py): which awaited names
have settled, over executions' keys and approvals' waits alike.

An execution's waiters wait on its ledger key (``idem_...``, ``client:...``);
an approval's on :func:`wait_name` of its id, which no ledger key can be.
"""

from __future__ import annotations

from collections.abc import Sequence

from slotward.engine.ports import Clock, UnitOfWork
from slotward.engine.usecases.executions import settled

__all__ = ["WAIT_PREFIX", "settled_waits", "wait_name"]

WAIT_PREFIX = "approval:"

Name = tuple[str, str]  # (tenant, key)


def wait_name(approval_id: str) -> str:
    """The name waiters of an approval's decision wait on."""
    return WAIT_PREFIX + approval_id


def settled_waits(uow: UnitOfWork, names: Sequence[Name], clock: Clock) -> list[Name]:
    """Which of ``names`` have settled: a lease no longer live, an approval no
    longer pending (or unknown)."""
    keys = [n for n in names if not n[1].startswith(WAIT_PREFIX)]
    out = settled(uow, keys, clock) if keys else []
    by_tenant: dict[str, list[str]] = {}
    for tenant, name in names:
        if name.startswith(WAIT_PREFIX):
            by_tenant.setdefault(tenant, []).append(name.removeprefix(WAIT_PREFIX))
    if by_tenant:
        with uow:
            now = clock.now()
            for tenant, ids in by_tenant.items():
                out += [(tenant, wait_name(i)) for i in uow.approvals.settled(tenant, ids, now)]
    return out
