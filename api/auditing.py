"""Services of the audit chain: list and verify it (HTTP), seal it, sign its head
and verify it against checkpoints (``slotward audit``), and the store's gauges
(``GET /metrics``). Part of api/service.py, which re-exports them; no aiohttp.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from functools import partial
from typing import Any

from slotward.api.bootstrap import Services
from slotward.engine.model import Gauges, Principal
from slotward.engine.ports import Clock, Store, UnitOfWork
from slotward.engine.rules.audit import AuditKey
from slotward.engine.rules.checkpoints import Checkpoint
from slotward.engine.usecases import audit, reads

__all__ = [
    "audited_tenants",
    "checkpoint_audit",
    "gauges",
    "list_audit",
    "seal_audit",
    "verify_chain",
    "verify_tenant_audit",
]


async def list_audit(svc: Services, principal: Principal, after: int, limit: int) -> dict[str, Any]:
    return await svc.store.read(
        partial(reads.list_audit, principal=principal, after=after, limit=limit)
    )


async def verify_chain(
    svc: Services, principal: Principal, checkpoint: str | None
) -> dict[str, Any]:
    return await svc.store.read(
        partial(
            reads.verify_audit,
            principal=principal,
            audit_key=svc.policy.audit_key,
            checkpoint=checkpoint,
        )
    )


async def verify_tenant_audit(
    store: Store, tenant: str, key: AuditKey | None, points: Sequence[Checkpoint]
) -> dict[str, Any]:
    """One tenant's chain, recomputed (``slotward audit verify``)."""

    def verified(uow: UnitOfWork) -> dict[str, Any]:
        with uow:
            return reads.verify_tenant(uow, tenant, key, points)

    return await store.read(verified)


async def audited_tenants(store: Store) -> list[str]:
    """Every tenant with an audit chain."""

    def tenants(uow: UnitOfWork) -> list[str]:
        with uow:
            return uow.audit.tenants()

    return await store.read(tenants)


async def seal_audit(store: Store, tenant: str, key: AuditKey, clock: Clock) -> int | None:
    """Seal a chain written before the key (``slotward audit seal``): the seal's seq."""
    return await store.write(partial(audit.seal_chain, tenant=tenant, key=key, clock=clock))


async def checkpoint_audit(store: Store, tenant: str, key: AuditKey, clock: Clock) -> str:
    """A signed checkpoint of the tenant's chain head (``slotward audit checkpoint``)."""
    return await store.write(partial(audit.take_checkpoint, tenant=tenant, key=key, clock=clock))


async def gauges(svc: Services, now: datetime) -> Gauges:
    """The store's figures for ``GET /metrics``."""

    def read(uow: UnitOfWork) -> Gauges:
        with uow:
            return uow.stats.gauges(now)

    return await svc.store.read(read)
