"""Handlers of the calendar binding API: decode, call one service (api/calendars.py), encode."""

from __future__ import annotations

from aiohttp import web

from slotward.api import calendars, service
from slotward.api.http import calendar_schemas as schemas
from slotward.api.http.auth import authenticate
from slotward.api.http.context import SERVICES
from slotward.api.http.jsonbody import read_json
from slotward.api.http.responses import json_response

__all__ = ["delete_calendar", "put_calendar", "read_calendar"]


async def put_calendar(request: web.Request) -> web.Response:
    svc = request.app[SERVICES]
    principal = await authenticate(request, svc.keys, service.ADMINS)
    fields = schemas.CALENDAR_PUT.validate(await read_json(request))
    attendee = request.match_info["attendee"]
    return json_response(await calendars.put_calendar(svc, principal, attendee, fields))


async def read_calendar(request: web.Request) -> web.Response:
    svc = request.app[SERVICES]
    principal = await authenticate(request, svc.keys, service.ADMINS)
    attendee = request.match_info["attendee"]
    return json_response(await calendars.get_calendar(svc, principal, attendee))


async def delete_calendar(request: web.Request) -> web.Response:
    svc = request.app[SERVICES]
    principal = await authenticate(request, svc.keys, service.ADMINS)
    await calendars.delete_calendar(svc, principal, request.match_info["attendee"])
    return web.Response(status=204)
