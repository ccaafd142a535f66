"""Handlers of the generic ledger: /v1/executions (being built: issue 4)."""

from __future__ import annotations

from aiohttp import web

from slotward.api.auth import authenticate
from slotward.api.context import SERVICES
from slotward.engine.errors import NotFound

__all__ = ["acquire_execution", "complete_execution", "read_execution"]


async def acquire_execution(request: web.Request) -> web.Response:
    await authenticate(request, request.app[SERVICES].keys)
    raise NotFound("not built yet", code="execution_not_found")


async def complete_execution(request: web.Request) -> web.Response:
    await authenticate(request, request.app[SERVICES].keys)
    raise NotFound("not built yet", code="execution_not_found")


async def read_execution(request: web.Request) -> web.Response:
    await authenticate(request, request.app[SERVICES].keys)
    raise NotFound("not built yet", code="execution_not_found")
