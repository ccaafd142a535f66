"""Handlers of the hold tools: decode, call one use case, encode."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from slotward.api.http import calls, schemas
from slotward.api.http.auth import authenticate, require_role
from slotward.api.http.context import SERVICES, Services
from slotward.api.http.jsonbody import read_json
from slotward.api.http.params import query_int
from slotward.api.http.shapes import Shape
from slotward.engine.errors import ValidationFailed
from slotward.engine.model import HoldStatus, Principal, Role
from slotward.engine.rules.attendees import parse_attendees
from slotward.engine.usecases.lifecycle import HoldAction
from slotward.engine.usecases.reads import get_hold, list_holds

__all__ = [
    "commit_hold",
    "create_hold",
    "list_holds_handler",
    "read_hold",
    "release_hold",
    "tool_call",
]

WRITERS: tuple[Role, ...] = ("agent", "admin")


async def _body(
    request: web.Request, svc: Services, shape: Shape, *, empty: bool = False
) -> dict[str, Any]:
    raw = await read_json(request, allow_empty=empty)
    fields: dict[str, Any] = shape.validate(raw, ignore=svc.policy.thought_fields)
    return fields


async def create_hold(request: web.Request) -> web.Response:
    svc = request.app[SERVICES]
    principal = await authenticate(request, svc.keys, WRITERS)
    fields = await _body(request, svc, schemas.HOLD_CREATE)
    key = calls.client_key(request)
    reply = await calls.create_hold(
        svc, principal, fields, fields["workflow_id"], fields.get("step"), key
    )
    return calls.reply_response(reply)


async def commit_hold(request: web.Request) -> web.Response:
    svc = request.app[SERVICES]
    principal = await authenticate(request, svc.keys, WRITERS)
    fields = await _body(request, svc, schemas.COMMIT)
    action = HoldAction(
        principal, request.match_info["hold_id"], fields["token"], calls.client_key(request)
    )
    return calls.reply_response(await calls.commit(svc, action))


async def release_hold(request: web.Request) -> web.Response:
    svc = request.app[SERVICES]
    principal = await authenticate(request, svc.keys, WRITERS)
    await _body(request, svc, schemas.RELEASE, empty=True)
    action = HoldAction(principal, request.match_info["hold_id"], None, calls.client_key(request))
    return calls.reply_response(await calls.release(svc, action))


async def read_hold(request: web.Request) -> web.Response:
    svc = request.app[SERVICES]
    principal = await authenticate(request, svc.keys)
    hold_id = request.match_info["hold_id"]
    now = svc.clock.now()
    doc = await svc.store.read(lambda uow: get_hold(uow, principal, hold_id, now))
    return calls.json_response(doc)


_STATUSES = {s.value: s for s in HoldStatus}


def _statuses(raw: str | None) -> list[HoldStatus] | None:
    if raw is None:
        return None
    wanted = [part.strip() for part in raw.split(",") if part.strip()]
    unknown = [w for w in wanted if w not in _STATUSES]
    if unknown or not wanted:
        raise ValidationFailed(
            f"status must be a comma-separated list of {', '.join(_STATUSES)}",
            code="invalid_field",
            extra={"field": "status"},
        )
    return [_STATUSES[w] for w in wanted]


async def list_holds_handler(request: web.Request) -> web.Response:
    svc = request.app[SERVICES]
    principal = await authenticate(request, svc.keys)
    q = request.query
    attendee = parse_attendees([q["attendee"]])[0] if "attendee" in q else None
    statuses = _statuses(q.get("status"))
    limit = query_int(request, "limit", 1, 200) or 50
    now = svc.clock.now()
    doc = await svc.store.read(
        lambda uow: list_holds(
            uow, principal, workflow_id=q.get("workflow_id"), statuses=statuses,
            attendee=attendee, cursor=q.get("cursor"), limit=limit, now=now,
        )
    )  # fmt: skip
    return calls.json_response(doc)


async def tool_call(request: web.Request) -> web.Response:
    """The same tools in the envelope an LLM emits."""
    svc = request.app[SERVICES]
    principal = await authenticate(request, svc.keys)
    envelope = await _body(request, svc, schemas.TOOL_CALL)
    tool = envelope["tool"]
    if tool != "find_free_slots":
        require_role(principal, WRITERS)
    args = envelope["arguments"]
    if tool == "create_calendar_hold":
        return await _tool_create(request, svc, principal, envelope, args)
    if tool == "find_free_slots":
        fields = schemas.SLOTS_ARGUMENTS.validate(args, ignore=svc.policy.thought_fields)
        doc = await calls.find_slots(svc, principal, fields["attendees"], fields)
        return calls.json_response(doc)
    shape = schemas.HOLD_REF_COMMIT if tool == "commit_calendar_hold" else schemas.HOLD_REF
    fields = shape.validate(args, ignore=svc.policy.thought_fields)
    action = HoldAction(
        principal, fields["hold_id"], fields.get("token"), calls.client_key(request)
    )
    run = calls.commit if tool == "commit_calendar_hold" else calls.release
    return calls.reply_response(await run(svc, action))


async def _tool_create(
    request: web.Request,
    svc: Services,
    principal: Principal,
    envelope: dict[str, Any],
    args: object,
) -> web.Response:
    if "workflow_id" not in envelope:
        raise ValidationFailed(
            "create_calendar_hold needs the envelope's 'workflow_id'",
            code="missing_field",
            extra={"field": "workflow_id"},
        )
    fields = schemas.HOLD_ARGUMENTS.validate(args, ignore=svc.policy.thought_fields)
    for alias, name in (("start_time", "start"), ("end_time", "end")):
        if alias in fields:
            if name in fields:
                raise ValidationFailed(
                    f"give '{name}' or '{alias}', not both",
                    code="invalid_field",
                    extra={"field": f"arguments.{alias}"},
                )
            fields[name] = fields.pop(alias)
    if "start" not in fields:
        raise ValidationFailed(
            "arguments need 'start' (or 'start_time')",
            code="missing_field",
            extra={"field": "arguments.start"},
        )
    reply = await calls.create_hold(
        svc, principal, fields, envelope["workflow_id"], envelope.get("step"),
        calls.client_key(request),
    )  # fmt: skip
    return calls.reply_response(reply)
