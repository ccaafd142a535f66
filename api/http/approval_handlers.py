"""Handlers of approvals and the approval policy: decode, call one service, encode."""

from __future__ import annotations

from aiohttp import web

from slotward.api import service
from slotward.api.http import approval_schemas as a
from slotward.api.http.auth import authenticate
from slotward.api.http.context import SERVICES, client_gone
from slotward.api.http.jsonbody import read_json
from slotward.api.http.params import query_choices, query_int
from slotward.api.http.responses import client_key, json_response, reply_response
from slotward.engine.approvals import ApprovalStatus

__all__ = [
    "create_approval",
    "decide_approval",
    "get_approval_policy",
    "list_approvals",
    "put_approval_policy",
    "read_approval",
]


async def create_approval(request: web.Request) -> web.Response:
    svc = request.app[SERVICES]
    principal = await authenticate(request, svc.keys, service.WRITERS)
    fields = a.APPROVAL_CREATE.validate(await read_json(request), ignore=svc.policy.thought_fields)
    return reply_response(
        await service.request_approval(svc, principal, fields, client_key(request))
    )


async def decide_approval(request: web.Request) -> web.Response:
    svc = request.app[SERVICES]
    principal = await authenticate(request, svc.keys, service.REVIEWERS)
    fields = a.APPROVAL_DECISION.validate(await read_json(request))
    approval_id = request.match_info["approval_id"]
    return reply_response(await service.decide_approval(svc, principal, approval_id, fields))


async def read_approval(request: web.Request) -> web.Response:
    svc = request.app[SERVICES]
    principal = await authenticate(request, svc.keys)
    wait = query_int(request, "wait", 0, service.MAX_WAIT_SECONDS) or 0
    doc = await service.read_approval(
        svc, principal, request.match_info["approval_id"], wait, lambda: client_gone(request)
    )
    return json_response(doc)


_STATUSES = {s.value: s for s in ApprovalStatus}


async def list_approvals(request: web.Request) -> web.Response:
    svc = request.app[SERVICES]
    principal = await authenticate(request, svc.keys)
    statuses = query_choices(request, "status", _STATUSES)
    limit = query_int(request, "limit", 1, 200) or 50
    doc = await service.list_approvals(
        svc, principal, statuses=statuses, cursor=request.query.get("cursor"), limit=limit
    )
    return json_response(doc)


async def put_approval_policy(request: web.Request) -> web.Response:
    svc = request.app[SERVICES]
    principal = await authenticate(request, svc.keys, service.ADMINS)
    fields = a.APPROVAL_POLICY_PUT.validate(await read_json(request))
    doc = await service.put_approval_policy(svc, principal, fields["require_approval"])
    return json_response(doc)


async def get_approval_policy(request: web.Request) -> web.Response:
    svc = request.app[SERVICES]
    principal = await authenticate(request, svc.keys)
    return json_response(await service.approval_policy_of(svc, principal))
