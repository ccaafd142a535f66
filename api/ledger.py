"""Services of the generic ledger (``/v1/executions``): acquire, with the long
poll of ``wait_ms``; complete; read. Part of api/service.py, which re-exports
them; no aiohttp here either. The entrypoint says how to tell that its client
has gone (HTTP looks at the connection), as ``gone``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from datetime import datetime
from functools import partial
from typing import Any

from slotward.api.bootstrap import Services
from slotward.api.completions import Waiter
from slotward.engine.errors import InProgress, ValidationFailed
from slotward.engine.model import Principal, Reply
from slotward.engine.ports import Clock, UnitOfWork
from slotward.engine.rules.fingerprint import check_client_key, check_step, strip_thoughts
from slotward.engine.usecases import executions
from slotward.engine.usecases.executions import ExecutionRequest, acquire, lookup_execution

__all__ = [
    "GONE_CHECK_SECONDS",
    "acquire_execution",
    "acquire_or_wait",
    "complete_execution",
    "get_execution",
    "pause_until",
]

# While waiting (wait_ms), check this often whether the client has gone: a look
# at the connection, never at the store.
GONE_CHECK_SECONDS = 0.5


async def acquire_execution(
    svc: Services,
    principal: Principal,
    fields: Mapping[str, Any],
    client_key: str | None,
    gone: Callable[[], bool],
) -> Reply:
    """Acquire the lease of a tool call, or its first result; ``wait_ms`` long-polls.

    ``gone`` tells whether the caller has left (the wait then ends).
    """
    key = None if client_key is None else check_client_key(client_key)
    workflow_id = fields.get("workflow_id")
    if workflow_id is None and key is None:
        raise ValidationFailed(
            "give 'workflow_id', or your own Idempotency-Key header",
            code="missing_field",
            extra={"field": "workflow_id"},
        )
    req = executions.ExecutionRequest(
        principal=principal,
        workflow_id=workflow_id,
        step=check_step(fields.get("step")),
        tool=fields["tool"],
        arguments=strip_thoughts(fields["arguments"], svc.policy.thought_fields),
        lease_seconds=fields.get("lease_seconds", svc.policy.default_lease_seconds),
        client_key=key,
    )
    reply = await acquire_or_wait(svc, req, fields.get("wait_ms", 0) / 1000, gone)
    await svc.storms.observe(principal.tenant, workflow_id, reply)
    return reply


async def complete_execution(
    svc: Services, principal: Principal, key: str, fields: Mapping[str, Any]
) -> Reply:
    done = executions.Completion(
        principal=principal,
        key=key,
        lease_token=fields["lease_token"],
        outcome=fields["outcome"],
        result=fields.get("result"),
    )
    reply = await svc.store.write(
        partial(executions.complete, done=done, policy=svc.policy, clock=svc.clock)
    )
    stored = executions.stored_key(done.key)
    if stored is not None:
        svc.completions.notify(principal.tenant, stored)
    await svc.storms.observe(principal.tenant, reply.workflow_id, reply)
    return reply


async def get_execution(svc: Services, principal: Principal, key: str) -> dict[str, Any]:
    """The record under ``key``: a lookup by its primary key, so a peek."""
    return await svc.peek(partial(executions.get_execution, principal=principal, key=key))


async def acquire_or_wait(
    svc: Services, req: ExecutionRequest, wait: float, gone: Callable[[], bool]
) -> Reply:
    """Acquire; while another caller holds a live lease, wait up to ``wait`` seconds.

    The wait ends with the stored result once it lands, or with this caller
    holding the lease (the holder failed retryably, or its lease expired). It
    also ends when the client has gone away (aiohttp does not cancel the
    handler then): nobody would receive a lease taken over for it.

    The store is read again when the completion is signalled or the process's
    fallback look finds the key settled (api/completions.py), and when the lease
    runs out: never on a timer of each waiter's own.
    """
    if wait <= 0:
        return await _acquire(svc, req)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait
    with svc.completions.listen(req.principal.tenant, req.keys()[0]) as waiter:
        while True:
            waiter.clear()  # before the look: a completion after it still wakes us
            try:
                return await _acquire(svc, req)
            except InProgress as busy:
                now = loop.time()
                if now >= deadline or gone():
                    raise
                await pause_until(waiter, min(deadline, now + _lease_left(busy, svc.clock)), gone)
                if gone():
                    raise


async def _acquire(svc: Services, req: ExecutionRequest) -> Reply:
    def look(uow: UnitOfWork) -> Reply | None:
        return lookup_execution(uow, req, svc.clock)

    def take(uow: UnitOfWork) -> Reply:
        return acquire(uow, req, svc.policy, svc.clock, svc.ids)

    reply = await svc.store.read(look)
    if reply is not None:
        return reply
    return await svc.store.write(take)


async def pause_until(waiter: Waiter, until: float, gone: Callable[[], bool]) -> None:
    """Until ``waiter`` is woken, the loop time ``until``, or the client has gone."""
    loop = asyncio.get_running_loop()
    while (left := until - loop.time()) > 0 and not gone():
        if await waiter.wait(min(left, GONE_CHECK_SECONDS)):
            return


def _lease_left(busy: InProgress, clock: Clock) -> float:
    """Seconds until the running lease ends, when a waiter may take it over."""
    try:
        end = datetime.fromisoformat(str(busy.extra["lease_expires_at"]))
    except (KeyError, ValueError):
        return float(busy.retry_after or 1)
    return max((end - clock.now()).total_seconds(), 0.01)
