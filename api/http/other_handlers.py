"""Handlers of the read side, the directory, health and the spec."""

from __future__ import annotations

import os
from typing import Any

from aiohttp import web

from slotward.api.http import calls, schemas
from slotward.api.http.auth import authenticate
from slotward.api.http.context import SERVICES
from slotward.api.http.jsonbody import read_json
from slotward.api.http.params import query_int, required
from slotward.engine.errors import ValidationFailed
from slotward.engine.model import Role
from slotward.engine.usecases.directory import put_attendee
from slotward.engine.usecases.reads import list_audit, verify_audit

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
        "from": required(request, "from"),
        "to": required(request, "to"),
    }
    if "timezone" in request.query:
        fields["timezone"] = request.query["timezone"]
    for name, high in (("duration_minutes", 1440), ("limit", 50)):
        value = query_int(request, name, 1, high)
        if value is not None:
            fields[name] = value
    try:
        found = await calls.find_slots(svc, principal, attendees, fields)
    except ValidationFailed as error:
        raise _plus_hint(error, fields) from None
    return calls.json_response(found)


def _plus_hint(error: ValidationFailed, fields: dict[str, Any]) -> ValidationFailed:
    """Name the usual cause of a query time that does not parse: an unencoded ``+``.

    In a URL query ``+`` means a space, so ``from=...T14:00:00+02:00`` arrives
    as ``...T14:00:00 02:00``.
    """
    value = fields.get(str(error.extra.get("field")))
    if error.code != "invalid_datetime" or not isinstance(value, str) or " " not in value:
        return error
    hint = f"{error.detail} (in a URL, write the offset's '+' as %2B: a bare '+' means a space)"
    return ValidationFailed(hint, code=error.code, extra=error.extra)


async def audit_handler(request: web.Request) -> web.Response:
    svc = request.app[SERVICES]
    principal = await authenticate(request, svc.keys)
    cursor = query_int(request, "cursor", 0, 2**53 - 1) or 0
    limit = query_int(request, "limit", 1, 500) or 100
    doc = await svc.store.read(lambda uow: list_audit(uow, principal, after=cursor, limit=limit))
    return calls.json_response(doc)


async def audit_verify_handler(request: web.Request) -> web.Response:
    svc = request.app[SERVICES]
    principal = await authenticate(request, svc.keys)
    checkpoint = request.query.get("checkpoint")
    key = svc.policy.audit_key
    doc = await svc.store.read(
        lambda uow: verify_audit(uow, principal, audit_key=key, checkpoint=checkpoint)
    )
    return calls.json_response(doc)


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
    # The process id tells an operator (and the multi-process test) which of
    # the `--workers` processes answered; it carries no tenant data.
    return calls.json_response({"status": "ok", "process": os.getpid()})


async def openapi_handler(request: web.Request) -> web.Response:
    return web.Response(body=request.app[OPENAPI], content_type="application/json")
