"""The observation of every request (metrics and the access log), and ``GET /metrics``.

What is counted, and how ``--workers`` processes share it: api/metrics.py.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler
from prometheus_client import CONTENT_TYPE_LATEST

from slotward.api import service
from slotward.api.http.auth import PRINCIPAL
from slotward.api.http.context import SERVICES
from slotward.api.http.jsonbody import ClientClosed
from slotward.api.http.responses import REPLY
from slotward.api.http.statuses import CLIENT_CLOSED, status_of
from slotward.api.logs import log_fields
from slotward.api.metrics import Metrics
from slotward.engine.errors import SlotwardError
from slotward.engine.model import Principal, Reply

__all__ = [
    "UNMATCHED",
    "metrics_handler",
    "observe_middleware",
    "observe_refusal",
    "observe_reply",
]

access_log = logging.getLogger("slotward.access")

UNMATCHED = "unmatched"  # the route label of a path no route matched


def _reply(response: web.StreamResponse) -> Reply | None:
    return response.get(REPLY)


def _route(request: web.Request) -> str:
    resource = request.match_info.route.resource
    return UNMATCHED if resource is None else resource.canonical


def _failure(exc: Exception) -> tuple[int, str]:
    """The status and the log outcome of an exception the problem middleware answers."""
    if isinstance(exc, SlotwardError):
        return status_of(exc), exc.code
    if isinstance(exc, web.HTTPException):
        return exc.status, "http_error"
    if isinstance(exc, ClientClosed):
        return CLIENT_CLOSED, "client_closed"
    return 500, "internal_error"


@web.middleware
async def observe_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Count and time every request and write its access line; errors pass through."""
    metrics = request.app[SERVICES].metrics
    started = time.perf_counter()
    try:
        response = await handler(request)
    except Exception as exc:
        observe_refusal(metrics, request.method, _route(request), request.get(PRINCIPAL),
                        started, exc)  # fmt: skip
        raise
    reply = _reply(response)
    route, principal = _route(request), request.get(PRINCIPAL)
    if reply is None:
        _observe(metrics, request.method, route, principal, started, response.status)
    else:
        observe_reply(metrics, request.method, route, principal, started, response.status, reply)
    return response


def observe_refusal(
    metrics: Metrics,
    method: str,
    route: str,
    principal: Principal | None,
    started: float,
    exc: Exception,
) -> None:
    """Count, time and log a request answered by ``exc``'s problem (also the front's:
    api/http/front.py). ``started``: ``time.perf_counter()`` at its start."""
    status, outcome = _failure(exc)
    key = None
    if isinstance(exc, SlotwardError):
        metrics.refused(exc)
        key = exc.idempotency_key
    _observe(metrics, method, route, principal, started, status, outcome=outcome, key=key)


def observe_reply(
    metrics: Metrics,
    method: str,
    route: str,
    principal: Principal | None,
    started: float,
    status: int,
    reply: Reply,
) -> None:
    """Count, time and log a request answered by a service's ``reply`` (also the front's)."""
    metrics.answered(reply)
    _observe(metrics, method, route, principal, started, status, outcome=reply.outcome,
             key=reply.key, workflow=reply.workflow_id, hold=reply.hold_id)  # fmt: skip


def _observe(
    metrics: Metrics,
    method: str,
    route: str,
    principal: Principal | None,
    started: float,
    status: int,
    **fields: Any,
) -> None:
    seconds = time.perf_counter() - started
    metrics.request(route, method, status, seconds)
    if not access_log.isEnabledFor(logging.INFO):
        return
    line = {"method": method, "route": route, "status": status,
            "duration_ms": round(seconds * 1000, 3), **fields}  # fmt: skip
    if principal is not None:
        line["agent"] = principal.agent_id
        line["tenant"] = principal.tenant
    log_fields(access_log, logging.INFO, f"{method} {route} {status}", line)


async def metrics_handler(request: web.Request) -> web.Response:
    """The Prometheus text format; the gauges are read from the store now."""
    svc = request.app[SERVICES]
    now = svc.clock.now()
    gauges = await service.gauges(svc, now)
    svc.metrics.set_gauges(gauges, now)
    return web.Response(
        body=svc.metrics.exposition(), headers={"Content-Type": CONTENT_TYPE_LATEST}
    )
