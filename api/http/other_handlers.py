"""Handlers of the read side, the directory, health and the spec: decode, call, encode."""

from __future__ import annotations

import os
from typing import Any

from aiohttp import web

from slotward.api import service
from slotward.api.http import schemas
from slotward.api.http.auth import authenticate
from slotward.api.http.context import SERVICES
from slotward.api.http.jsonbody import read_json
from slotward.api.http.params import query_int, required
from slotward.api.http.responses import json_response
from slotward.engine.errors import ValidationFailed

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
        found = await service.find_slots(svc, principal, attendees, fields)
    except ValidationFailed as error:
        raise _plus_hint(error, fields) from None
    return json_response(found)


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
    doc = await service.list_audit(svc, principal, cursor, limit)
    return json_response(doc)


async def audit_verify_handler(request: web.Request) -> web.Response:
    svc = request.app[SERVICES]
    principal = await authenticate(request, svc.keys)
    doc = await service.verify_chain(svc, principal, request.query.get("checkpoint"))
    return json_response(doc)


async def put_attendee_handler(request: web.Request) -> web.Response:
    svc = request.app[SERVICES]
    principal = await authenticate(request, svc.keys, service.ADMINS)
    fields = schemas.ATTENDEE_PUT.validate(await read_json(request))
    doc = await service.put_attendee(svc, principal, fields)
    return json_response(doc)


async def health_handler(request: web.Request) -> web.Response:
    # The process id tells an operator (and the multi-process test) which of
    # the `--workers` processes answered; it carries no tenant data.
    return json_response({"status": "ok", "process": os.getpid()})


async def openapi_handler(request: web.Request) -> web.Response:
    return web.Response(body=request.app[OPENAPI], content_type="application/json")
