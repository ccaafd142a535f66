"""GET /v1/workflows/{workflow_id} (being built: issue 4)."""

from __future__ import annotations

from aiohttp import web

from slotward.api.auth import authenticate
from slotward.api.context import SERVICES
from slotward.engine.errors import NotFound

__all__ = ["workflow_handler"]


async def workflow_handler(request: web.Request) -> web.Response:
    await authenticate(request, request.app[SERVICES].keys)
    raise NotFound("not built yet", code="workflow_not_found")
