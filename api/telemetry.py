"""Prometheus metrics, and the observation of every request (metrics + access log).

Metrics carry no tenant data: every label comes from a small fixed set (route
templates, methods, statuses, outcomes, conflict kinds, hold statuses), never
from a tenant, agent, workflow, key or raw path. Each process has its own
registry; gauges are read from the store at scrape time, so they describe the
whole database whichever process answers.
"""

from __future__ import annotations

import logging
import time
from datetime import datetime
from typing import TYPE_CHECKING, Any

from aiohttp import web
from aiohttp.typedefs import Handler
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from slotward.api.auth import PRINCIPAL
from slotward.engine.errors import SlotConflict, SlotwardError
from slotward.engine.model import Gauges, HoldStatus, Reply
from slotward.engine.ports import UnitOfWork

if TYPE_CHECKING:
    from slotward.api.context import Services

__all__ = [
    "CONFLICT_KINDS",
    "IDEMPOTENCY_OUTCOMES",
    "UNMATCHED",
    "Metrics",
    "metrics_handler",
    "observe_middleware",
]

access_log = logging.getLogger("slotward.access")

IDEMPOTENCY_OUTCOMES = ("fresh", "replayed", "in_progress", "mismatch", "takeover",
                        "fencing_rejected")  # fmt: skip
CONFLICT_KINDS = ("held", "committed", "external")
UNMATCHED = "unmatched"  # the route label of a path no route matched
_ERROR_OUTCOMES = {
    "request_in_progress": "in_progress",
    "idempotency_key_reused": "mismatch",
    "lease_lost": "fencing_rejected",
}
# Any other method is "other": a client must not be able to mint label values.
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


class Metrics:
    """One process's metrics, in a registry of its own (tests run many servers)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self._requests = Counter(
            "slotward_http_requests", "HTTP requests answered, by route, method and status",
            ["route", "method", "status"], registry=r,
        )  # fmt: skip
        self._latency = Histogram(
            "slotward_http_request_duration_seconds",
            "Time from the request reaching the app to its answer, by route template and method",
            ["route", "method"], registry=r,
        )  # fmt: skip
        self._idempotency = Counter(
            "slotward_idempotency", "Idempotent calls by how the ledger answered them",
            ["outcome"], registry=r,
        )  # fmt: skip
        self._conflicts = Counter(
            "slotward_conflicts", "Refused claims (409 slot_conflict), once per kind they met",
            ["kind"], registry=r,
        )  # fmt: skip
        self._preemptions = Counter(
            "slotward_preemptions", "Holds preempted by a higher-priority claim", registry=r
        )
        self._storms = Counter(
            "slotward_retry_storms", "Workflows flagged as retry storms", registry=r
        )
        self._purged = Counter(
            "slotward_ledger_purged", "Ledger records deleted after their retention", registry=r
        )
        self._holds = Gauge(
            "slotward_holds", "Holds in the store by status", ["status"], registry=r
        )
        self._backlog = Gauge(
            "slotward_outbox_backlog", "Outbox rows waiting for delivery", registry=r
        )
        self._lag = Gauge(
            "slotward_sweeper_lag_seconds",
            "How long the oldest held hold past its expiry has waited for the sweeper",
            registry=r,
        )
        self._executing = Gauge(
            "slotward_ledger_executing", "Ledger records executing (leases in flight)", registry=r
        )
        for outcome in IDEMPOTENCY_OUTCOMES:  # present at 0, so rates work from the start
            self._idempotency.labels(outcome)
        for kind in CONFLICT_KINDS:
            self._conflicts.labels(kind)
        for status in HoldStatus:
            self._holds.labels(status.value)

    def request(self, route: str, method: str, status: int, seconds: float) -> None:
        """One answered request."""
        method = method if method in _METHODS else "other"
        self._requests.labels(route, method, str(status)).inc()
        self._latency.labels(route, method).observe(seconds)

    def answered(self, reply: Reply) -> None:
        """A mutating call's answer (fresh, replayed or taken over)."""
        self._idempotency.labels(reply.outcome).inc()
        if not reply.replayed and reply.preempted:
            self._preemptions.inc(reply.preempted)

    def refused(self, error: SlotwardError) -> None:
        """A call refused with ``error``: counted if it says something of the ledger."""
        outcome = _ERROR_OUTCOMES.get(error.code)
        if outcome is not None:
            self._idempotency.labels(outcome).inc()
        if isinstance(error, SlotConflict):
            met = {c.get("kind") for c in error.extra.get("conflicts", ()) if isinstance(c, dict)}
            for kind in met & set(CONFLICT_KINDS):
                self._conflicts.labels(kind).inc()

    def retry_storm(self) -> None:
        """A workflow was flagged as a retry storm."""
        self._storms.inc()

    def purged(self, count: int) -> None:
        """``count`` ledger records passed their retention and were deleted."""
        if count > 0:
            self._purged.inc(count)

    def set_gauges(self, gauges: Gauges, now: datetime) -> None:
        """Whole-store figures, refreshed at scrape time."""
        for status in HoldStatus:
            self._holds.labels(status.value).set(gauges.holds_by_status.get(status.value, 0))
        self._backlog.set(gauges.outbox_backlog)
        self._executing.set(gauges.executing)
        overdue = gauges.oldest_overdue
        self._lag.set(0.0 if overdue is None else max(0.0, (now - overdue).total_seconds()))

    def exposition(self) -> bytes:
        """The Prometheus text format of everything above."""
        return generate_latest(self.registry)


def _services(request: web.Request) -> Services:
    # api/context.py imports Metrics from this module, so its key is looked up
    # when a request runs rather than at import time.
    from slotward.api.context import SERVICES

    return request.app[SERVICES]


def _reply(response: web.StreamResponse) -> Reply | None:
    from slotward.api.calls import REPLY  # calls imports context: see _services

    return response.get(REPLY)


def _route(request: web.Request) -> str:
    resource = request.match_info.route.resource
    return UNMATCHED if resource is None else resource.canonical


def _failure(exc: Exception) -> tuple[int, str]:
    """The status and the log outcome of an exception the problem middleware answers."""
    if isinstance(exc, SlotwardError):
        return exc.status, exc.code
    if isinstance(exc, web.HTTPException):
        return exc.status, "http_error"
    return 500, "internal_error"


@web.middleware
async def observe_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Count and time every request and write its access line; errors pass through."""
    metrics = _services(request).metrics
    started = time.perf_counter()
    try:
        response = await handler(request)
    except Exception as exc:
        status, outcome = _failure(exc)
        if isinstance(exc, SlotwardError):
            metrics.refused(exc)
        key = exc.idempotency_key if isinstance(exc, SlotwardError) else None
        _observe(request, metrics, started, status, outcome=outcome, key=key)
        raise
    reply = _reply(response)
    if reply is None:
        _observe(request, metrics, started, response.status)
    else:
        metrics.answered(reply)
        _observe(request, metrics, started, response.status, outcome=reply.outcome,
                 key=reply.key, workflow=reply.workflow_id, hold=reply.hold_id)  # fmt: skip
    return response


def _observe(
    request: web.Request, metrics: Metrics, started: float, status: int, **fields: Any
) -> None:
    seconds = time.perf_counter() - started
    route = _route(request)
    metrics.request(route, request.method, status, seconds)
    if not access_log.isEnabledFor(logging.INFO):
        return
    principal = request.get(PRINCIPAL)
    if principal is not None:
        fields.update(agent=principal.agent_id, tenant=principal.tenant)
    access_log.info(
        "%s %s %s", request.method, route, status,
        extra={"method": request.method, "route": route, "status": status,
               "duration_ms": round(seconds * 1000, 3), **fields},
    )  # fmt: skip


async def metrics_handler(request: web.Request) -> web.Response:
    """The Prometheus text format; the gauges are read from the store now."""
    svc = _services(request)
    now = svc.clock.now()
    gauges = await svc.store.read(lambda uow: _gauges(uow, now))
    svc.metrics.set_gauges(gauges, now)
    return web.Response(
        body=svc.metrics.exposition(), headers={"Content-Type": CONTENT_TYPE_LATEST}
    )


def _gauges(uow: UnitOfWork, now: datetime) -> Gauges:
    with uow:
        return uow.stats.gauges(now)
