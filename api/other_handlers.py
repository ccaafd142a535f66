"""Handlers of the read side, the directory, health and the spec."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from slotward.api import calls, schemas
from slotward.api.auth import authenticate
from slotward.api.context import SERVICES
from slotward.api.jsonbody import read_json
from slotward.engine.directory import put_attendee
from slotward.engine.errors import ValidationFailed
from slotward.engine.model import Role
from slotward.engine.queries import list_audit, verify_audit

__all__ = [
    "OPENAPI",
    "audit_handler",
    "audit_verify_handler",
    "availability_handler",
    "health_handler",
    "openapi_handler",
    "put_attendee_handler",
]

OPENAPI = web.AppKey("openapi", bytes)
ADMINS: tuple[Role, ...] = ("admin",)


def _required(request: web.Request, name: str) -> str:
    value = request.query.get(name)
    if not value:
        raise ValidationFailed(
            f"query parameter {name!r} is required", code="missing_field", extra={"field": name}
        )
    return value


def _int_param(request: web.Request, name: str, low: int, high: int) -> int | None:
    raw = request.query.get(name)
    if raw is None:
        return None
    if not raw.isdigit() or not low <= int(raw) <= high:
        raise ValidationFailed(
            f"{name!r} must be an integer from {low} to {high}",
            code="invalid_field",
            extra={"field": name},
        )
    return int(raw)


async def availability_handler(request: web.Request) -> web.Response:
    svc = request.app[SERVICES]
    principal = await authenticate(request, svc.keys)
    attendees = [
        part.strip()
        for value in request.query.getall("attendees", [])
        for part in value.split(",")
        if part.strip()
    ]
    fields: dict[str, Any] = {
        "from": _required(request, "from"),
        "to": _required(request, "to"),
    }
    if "timezone" in request.query:
        fields["timezone"] = request.query["timezone"]
    for name, high in (("duration_minutes", 1440), ("limit", 50)):
        value = _int_param(request, name, 1, high)
        if value is not None:
            fields[name] = value
    return calls.json_response(await calls.find_slots(svc, principal, attendees, fields))


async def audit_handler(request: web.Request) -> web.Response:
    svc = request.app[SERVICES]
    principal = await authenticate(request, svc.keys)
    cursor = request.query.get("cursor", "0")
    if not cursor.isdigit():
        raise ValidationFailed(
            "cursor must be a seq", code="invalid_field", extra={"field": "cursor"}
        )
    limit = _int_param(request, "limit", 1, 500) or 100
    doc = await svc.store.read(
        lambda uow: list_audit(uow, principal, after=int(cursor), limit=limit)
    )
    return calls.json_response(doc)


async def audit_verify_handler(request: web.Request) -> web.Response:
    svc = request.app[SERVICES]
    principal = await authenticate(request, svc.keys)
    return calls.json_response(await svc.store.read(lambda uow: verify_audit(uow, principal)))


async def put_attendee_handler(request: web.Request) -> web.Response:
    svc = request.app[SERVICES]
    principal = await authenticate(request, svc.keys, ADMINS)
    fields = schemas.ATTENDEE_PUT.validate(await read_json(request))
    doc = await svc.store.write(
        lambda uow: put_attendee(
            uow, principal, fields.get("id"), fields.get("name"), fields["emails"], svc.clock
        )
    )
    return calls.json_response(doc)


async def health_handler(request: web.Request) -> web.Response:
    return calls.json_response({"status": "ok"})


async def openapi_handler(request: web.Request) -> web.Response:
    return web.Response(body=request.app[OPENAPI], content_type="application/json")
