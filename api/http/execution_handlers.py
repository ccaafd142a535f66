"""Handlers of the generic ledger (``/v1/executions``): decode, call, encode."""

from __future__ import annotations

from aiohttp import web

from slotward.api import service
from slotward.api.http import schemas
from slotward.api.http.auth import authenticate
from slotward.api.http.context import SERVICES, client_gone
from slotward.api.http.jsonbody import read_json
from slotward.api.http.responses import client_key, json_response, reply_response

__all__ = ["acquire_execution", "complete_execution", "read_execution"]


async def acquire_execution(request: web.Request) -> web.Response:
    svc = request.app[SERVICES]
    principal = await authenticate(request, svc.keys, service.WRITERS)
    ignore = svc.policy.thought_fields
    fields = schemas.EXECUTION_ACQUIRE.validate(await read_json(request), ignore=ignore)
    reply = await service.acquire_execution(
        svc, principal, fields, client_key(request), lambda: client_gone(request)
    )
    return reply_response(reply)


async def complete_execution(request: web.Request) -> web.Response:
    svc = request.app[SERVICES]
    principal = await authenticate(request, svc.keys, service.WRITERS)
    ignore = svc.policy.thought_fields
    fields = schemas.EXECUTION_COMPLETE.validate(await read_json(request), ignore=ignore)
    key = request.match_info["key"]
    return reply_response(await service.complete_execution(svc, principal, key, fields))


async def read_execution(request: web.Request) -> web.Response:
    svc = request.app[SERVICES]
    principal = await authenticate(request, svc.keys)
    return json_response(await service.get_execution(svc, principal, request.match_info["key"]))
