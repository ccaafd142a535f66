"""Handlers of the webhook admin API: decode, call one service (api/webhooks.py), encode."""

from __future__ import annotations

from aiohttp import web

from slotward.api import service, webhooks
from slotward.api.http import webhook_schemas as schemas
from slotward.api.http.auth import authenticate
from slotward.api.http.context import SERVICES
from slotward.api.http.jsonbody import read_json
from slotward.api.http.params import query_int
from slotward.api.http.responses import json_response

__all__ = [
    "create_webhook",
    "delete_webhook",
    "enable_webhook",
    "list_events",
    "list_webhooks",
    "read_event",
    "read_webhook",
    "redrive_event",
    "rotate_webhook",
]

_DEFAULT_LIMIT = 50


async def create_webhook(request: web.Request) -> web.Response:
    svc = request.app[SERVICES]
    principal = await authenticate(request, svc.keys, service.ADMINS)
    fields = schemas.WEBHOOK_CREATE.validate(await read_json(request))
    return json_response(await webhooks.create_webhook(svc, principal, fields), status=201)


async def list_webhooks(request: web.Request) -> web.Response:
    svc = request.app[SERVICES]
    principal = await authenticate(request, svc.keys, service.ADMINS)
    limit = query_int(request, "limit", 1, 200) or _DEFAULT_LIMIT
    cursor = request.query.get("cursor")
    return json_response(await webhooks.list_webhooks(svc, principal, cursor=cursor, limit=limit))


async def read_webhook(request: web.Request) -> web.Response:
    svc = request.app[SERVICES]
    principal = await authenticate(request, svc.keys, service.ADMINS)
    return json_response(
        await webhooks.get_webhook(svc, principal, request.match_info["webhook_id"])
    )


async def rotate_webhook(request: web.Request) -> web.Response:
    svc = request.app[SERVICES]
    principal = await authenticate(request, svc.keys, service.ADMINS)
    fields = schemas.WEBHOOK_ROTATE.validate(await read_json(request, allow_empty=True))
    doc = await webhooks.rotate_webhook(
        svc, principal, request.match_info["webhook_id"], fields.get("overlap_hours")
    )
    return json_response(doc)


async def enable_webhook(request: web.Request) -> web.Response:
    svc = request.app[SERVICES]
    principal = await authenticate(request, svc.keys, service.ADMINS)
    schemas.WEBHOOK_ENABLE.validate(await read_json(request, allow_empty=True))
    return json_response(
        await webhooks.enable_webhook(svc, principal, request.match_info["webhook_id"])
    )


async def delete_webhook(request: web.Request) -> web.Response:
    svc = request.app[SERVICES]
    principal = await authenticate(request, svc.keys, service.ADMINS)
    await webhooks.delete_webhook(svc, principal, request.match_info["webhook_id"])
    return web.Response(status=204)


async def list_events(request: web.Request) -> web.Response:
    svc = request.app[SERVICES]
    principal = await authenticate(request, svc.keys, service.ADMINS)
    limit = query_int(request, "limit", 1, 100) or _DEFAULT_LIMIT
    doc = await webhooks.list_events(
        svc, principal, state=request.query.get("state"), cursor=request.query.get("cursor"),
        limit=limit,
    )  # fmt: skip
    return json_response(doc)


async def read_event(request: web.Request) -> web.Response:
    svc = request.app[SERVICES]
    principal = await authenticate(request, svc.keys, service.ADMINS)
    return json_response(await webhooks.get_event(svc, principal, request.match_info["event_id"]))


async def redrive_event(request: web.Request) -> web.Response:
    svc = request.app[SERVICES]
    principal = await authenticate(request, svc.keys, service.ADMINS)
    doc = await webhooks.redrive_event(svc, principal, request.match_info["event_id"])
    return json_response(doc)
