"""Handlers of the hold tools: decode, call one service (api/service.py), encode.

The same tools in the envelopes a model emits: api/http/tool_handlers.py.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from slotward.api import service
from slotward.api.bootstrap import Services
from slotward.api.http import schemas
from slotward.api.http.auth import authenticate
from slotward.api.http.context import SERVICES
from slotward.api.http.jsonbody import decode_body, read_body
from slotward.api.http.params import query_choices, query_int
from slotward.api.http.responses import client_key, json_response, reply_response
from slotward.api.replays import sent_as
from slotward.engine.model import HoldStatus, Principal, Reply
from slotward.engine.rules.attendees import parse_attendees
from slotward.engine.rules.shapes import Shape

__all__ = [
    "answer_commit",
    "answer_create",
    "answer_release",
    "commit_hold",
    "create_hold",
    "list_holds_handler",
    "read_hold",
    "release_hold",
]


async def create_hold(request: web.Request) -> web.Response:
    """A retry sent as its call was (the same caller and bytes, no client key) is
    replayed from what this process knows of it (api/replays.py)."""
    svc = request.app[SERVICES]
    principal = await authenticate(request, svc.keys, service.WRITERS)
    raw = await read_body(request)
    return reply_response(await answer_create(svc, principal, raw, client_key(request)))


async def answer_create(svc: Services, principal: Principal, raw: bytes, key: str | None) -> Reply:
    """The answer to a create of ``principal`` whose body is ``raw`` and client key
    ``key``: here, and for the same request served by the front (api/http/front.py)."""
    sent = None if key is not None else sent_as(principal, raw)
    if sent is not None and (known := await service.replay_known_create(svc, principal, sent)):
        return known
    fields = _validated(svc, schemas.HOLD_CREATE, decode_body(raw))
    return await service.create_hold(
        svc, principal, fields, workflow_id=fields["workflow_id"], step=fields.get("step"),
        client_key=key, sent=sent,
    )  # fmt: skip


async def commit_hold(request: web.Request) -> web.Response:
    svc = request.app[SERVICES]
    principal = await authenticate(request, svc.keys, service.WRITERS)
    raw = await read_body(request)
    hold_id = request.match_info["hold_id"]
    return reply_response(await answer_commit(svc, principal, hold_id, raw, client_key(request)))


async def answer_commit(
    svc: Services, principal: Principal, hold_id: str, raw: bytes, key: str | None
) -> Reply:
    """The answer to a commit (here, and served by the front: api/http/front.py)."""
    fields = _validated(svc, schemas.COMMIT, decode_body(raw))
    return await service.commit(svc, principal, hold_id, fields["token"], key)


async def release_hold(request: web.Request) -> web.Response:
    svc = request.app[SERVICES]
    principal = await authenticate(request, svc.keys, service.WRITERS)
    raw = await read_body(request)
    hold_id = request.match_info["hold_id"]
    return reply_response(await answer_release(svc, principal, hold_id, raw, client_key(request)))


async def answer_release(
    svc: Services, principal: Principal, hold_id: str, raw: bytes, key: str | None
) -> Reply:
    """The answer to a release (here, and served by the front: api/http/front.py)."""
    _validated(svc, schemas.RELEASE, decode_body(raw, allow_empty=True))
    return await service.release(svc, principal, hold_id, key)


def _validated(svc: Services, shape: Shape, doc: object) -> dict[str, Any]:
    """``doc`` validated as ``shape``, the policy's thought fields left out."""
    fields: dict[str, Any] = shape.validate(doc, ignore=svc.policy.thought_fields)
    return fields


async def read_hold(request: web.Request) -> web.Response:
    svc = request.app[SERVICES]
    principal = await authenticate(request, svc.keys)
    return json_response(await service.get_hold(svc, principal, request.match_info["hold_id"]))


_STATUSES = {s.value: s for s in HoldStatus}


async def list_holds_handler(request: web.Request) -> web.Response:
    svc = request.app[SERVICES]
    principal = await authenticate(request, svc.keys)
    q = request.query
    attendee = parse_attendees([q["attendee"]])[0] if "attendee" in q else None
    statuses = query_choices(request, "status", _STATUSES)
    limit = query_int(request, "limit", 1, 200) or 50
    doc = await service.list_holds(
        svc, principal, workflow_id=q.get("workflow_id"), statuses=statuses, attendee=attendee,
        cursor=q.get("cursor"), limit=limit,
    )  # fmt: skip
    return json_response(doc)
