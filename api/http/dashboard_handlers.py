"""GET /v1/timeline and GET /v1/workflows: the dashboard's reads (api/dashboard.py)."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from slotward.api import service
from slotward.api.http.auth import authenticate
from slotward.api.http.context import SERVICES
from slotward.api.http.params import query_int, required
from slotward.api.http.responses import json_response

__all__ = ["timeline_handler", "workflows_handler"]


async def timeline_handler(request: web.Request) -> web.Response:
    """Any key of the tenant; ``attendee`` may repeat and hold comma-separated entries."""
    svc = request.app[SERVICES]
    principal = await authenticate(request, svc.keys)
    fields: dict[str, Any] = {"from": required(request, "from"), "to": required(request, "to")}
    if "timezone" in request.query:
        fields["timezone"] = request.query["timezone"]
    attendees = [
        part.strip()
        for value in request.query.getall("attendee", [])
        for part in value.split(",")
        if part.strip()
    ]
    return json_response(await service.timeline(svc, principal, fields, attendees))


async def workflows_handler(request: web.Request) -> web.Response:
    """Any key of the tenant: its workflows with the most replays first."""
    svc = request.app[SERVICES]
    principal = await authenticate(request, svc.keys)
    limit = query_int(request, "limit", 1, 200) or 50
    return json_response(await service.busiest_workflows(svc, principal, limit))
