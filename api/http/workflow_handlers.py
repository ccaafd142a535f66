"""GET /v1/workflows/{workflow_id}: one workflow's holds, executions and replays."""

from __future__ import annotations

from aiohttp import web

from slotward.api import service
from slotward.api.http.auth import authenticate
from slotward.api.http.context import SERVICES
from slotward.api.http.responses import json_response

__all__ = ["workflow_handler"]


async def workflow_handler(request: web.Request) -> web.Response:
    """Any key of the tenant may read; another tenant's workflow answers 404."""
    svc = request.app[SERVICES]
    principal = await authenticate(request, svc.keys)
    doc = await service.workflow(svc, principal, request.match_info["workflow_id"])
    return json_response(doc)
