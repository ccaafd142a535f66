"""Prometheus metrics and the per-request observation (being built: issue 4)."""

from __future__ import annotations

from aiohttp import web
from aiohttp.typedefs import Handler

from slotward.engine.model import Gauges

__all__ = ["Metrics", "metrics_handler", "observe_middleware"]


class Metrics:
    """One process's metrics. Placeholder interface; the real one records."""

    def retry_storm(self) -> None:
        """A workflow was flagged as a retry storm."""

    def purged(self, count: int) -> None:
        """``count`` ledger records passed their retention and were deleted."""

    def set_gauges(self, gauges: Gauges, lag_seconds: float) -> None:
        """Whole-store figures, refreshed at scrape time."""


@web.middleware
async def observe_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    return await handler(request)


async def metrics_handler(request: web.Request) -> web.Response:
    return web.Response(text="", content_type="text/plain")
