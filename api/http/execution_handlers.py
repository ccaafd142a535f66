"""Handlers of the generic ledger (``/v1/executions``): decode, call, encode."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime

from aiohttp import web

from slotward.api.completions import Waiter
from slotward.api.http import calls, schemas
from slotward.api.http.auth import authenticate
from slotward.api.http.context import SERVICES, Services
from slotward.api.http.hold_handlers import WRITERS
from slotward.api.http.jsonbody import read_json
from slotward.engine.errors import InProgress, ValidationFailed
from slotward.engine.model import Reply
from slotward.engine.ports import Clock
from slotward.engine.rules.fingerprint import check_step, strip_thoughts
from slotward.engine.usecases.executions import (
    Completion,
    ExecutionRequest,
    acquire,
    complete,
    get_execution,
    lookup_execution,
    stored_key,
)

__all__ = ["acquire_execution", "complete_execution", "read_execution"]

# While waiting (wait_ms), check this often whether the client has gone: a look
# at the connection, never at the store.
GONE_CHECK_SECONDS = 0.5


async def acquire_execution(request: web.Request) -> web.Response:
    svc = request.app[SERVICES]
    principal = await authenticate(request, svc.keys, WRITERS)
    ignore = svc.policy.thought_fields
    fields = schemas.EXECUTION_ACQUIRE.validate(await read_json(request), ignore=ignore)
    client_key = calls.client_key(request)
    workflow_id = fields.get("workflow_id")
    if workflow_id is None and client_key is None:
        raise ValidationFailed(
            "give 'workflow_id', or your own Idempotency-Key header",
            code="missing_field",
            extra={"field": "workflow_id"},
        )
    req = ExecutionRequest(
        principal=principal,
        workflow_id=workflow_id,
        step=check_step(fields.get("step")),
        tool=fields["tool"],
        arguments=strip_thoughts(fields["arguments"], ignore),
        lease_seconds=fields.get("lease_seconds", svc.policy.default_lease_seconds),
        client_key=client_key,
    )
    wait = fields.get("wait_ms", 0) / 1000
    reply = await _acquire_or_wait(svc, req, wait, lambda: _gone(request))
    await svc.storms.observe(principal.tenant, workflow_id, reply)
    return calls.reply_response(reply)


def _gone(request: web.Request) -> bool:
    transport = request.transport
    return transport is None or transport.is_closing()


async def _acquire_or_wait(
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
                await _pause(waiter, min(deadline, now + _lease_left(busy, svc.clock)), gone)
                if gone():
                    raise


async def _acquire(svc: Services, req: ExecutionRequest) -> Reply:
    reply = await svc.store.read(lambda uow: lookup_execution(uow, req, svc.clock))
    if reply is not None:
        return reply
    return await svc.store.write(lambda uow: acquire(uow, req, svc.policy, svc.clock, svc.ids))


async def _pause(waiter: Waiter, until: float, gone: Callable[[], bool]) -> None:
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


async def complete_execution(request: web.Request) -> web.Response:
    svc = request.app[SERVICES]
    principal = await authenticate(request, svc.keys, WRITERS)
    ignore = svc.policy.thought_fields
    fields = schemas.EXECUTION_COMPLETE.validate(await read_json(request), ignore=ignore)
    done = Completion(
        principal=principal,
        key=request.match_info["key"],
        lease_token=fields["lease_token"],
        outcome=fields["outcome"],
        result=fields.get("result"),
    )
    reply = await svc.store.write(lambda uow: complete(uow, done, svc.policy, svc.clock))
    key = stored_key(done.key)
    if key is not None:
        svc.completions.notify(principal.tenant, key)
    await svc.storms.observe(principal.tenant, reply.workflow_id, reply)
    return calls.reply_response(reply)


async def read_execution(request: web.Request) -> web.Response:
    svc = request.app[SERVICES]
    principal = await authenticate(request, svc.keys)
    key = request.match_info["key"]
    return calls.json_response(await svc.store.read(lambda uow: get_execution(uow, principal, key)))
