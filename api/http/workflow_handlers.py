"""GET /v1/workflows/{workflow_id}: one workflow's holds, executions and replays."""

from __future__ import annotations

from aiohttp import web

from slotward.api.http import calls
from slotward.api.http.auth import authenticate
from slotward.api.http.context import SERVICES
from slotward.engine.usecases.workflows import workflow_view

__all__ = ["workflow_handler"]


async def workflow_handler(request: web.Request) -> web.Response:
    """Any key of the tenant may read; another tenant's workflow answers 404."""
    svc = request.app[SERVICES]
    principal = await authenticate(request, svc.keys)
    workflow_id = request.match_info["workflow_id"]
    # This process's replays not yet flushed count too: a caller reads its own.
    unflushed = svc.storms.unflushed(principal.tenant, workflow_id)
    now = svc.clock.now()
    doc = await svc.store.read(
        lambda uow: workflow_view(uow, principal, workflow_id, now, unflushed)
    )
    return calls.json_response(doc)
