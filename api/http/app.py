"""The aiohttp application, over the services api/bootstrap.py wires."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable

from aiohttp import web

from slotward.adapters.webhooks.sender import WebhookSender
from slotward.api.bootstrap import Services
from slotward.api.config import Config
from slotward.api.http.context import SERVICES
from slotward.api.http.jsonbody import MAX_BODY_BYTES
from slotward.api.http.openapi import build_openapi
from slotward.api.http.other_handlers import OPENAPI
from slotward.api.http.params import QUERY_NAMES, QUERY_REPEATABLE, check_query, refuse_nul
from slotward.api.http.problems import problem_middleware
from slotward.api.http.routes import Handler, Route
from slotward.api.http.static_handlers import WEB_FILES, load_web_files
from slotward.api.http.stream_handlers import CLOSING, close_streams
from slotward.api.http.table import ROUTES
from slotward.api.http.telemetry import observe_middleware
from slotward.api.workers.providers import CalendarWriter, ProviderSync, writable_providers
from slotward.api.workers.relay import Relay
from slotward.api.workers.sweeper import sweep_forever

__all__ = ["build_app"]


def build_app(
    services: Services, config: Config, *, sweep: bool = True, relay: bool = True
) -> web.Application:
    """The HTTP application. It closes the store when it shuts down.

    ``sweep`` and ``relay`` run the background sweeper and the outbox relay
    (api/workers) in this process, as every server does.
    """
    app = web.Application(
        middlewares=[problem_middleware, observe_middleware, refuse_nul],
        client_max_size=MAX_BODY_BYTES + 1024,
    )
    app[SERVICES] = services
    app[OPENAPI] = json.dumps(build_openapi(ROUTES), separators=(",", ":")).encode()
    app[WEB_FILES] = load_web_files()  # the dashboard's files: the allow-list, read once
    app[CLOSING] = asyncio.Event()
    app.on_shutdown.append(close_streams)  # open event streams end before the server waits
    for route in ROUTES:
        app.router.add_route(route.method, route.path, _strict_query(route))
    app.cleanup_ctx.append(
        _lifetime(services, config, config.sweep_interval_seconds if sweep else None, relay)
    )
    return app


def _strict_query(route: Route) -> Handler:
    """The route's handler, refusing query parameters the route does not declare.

    Behind authentication where the route has it (``authenticate`` checks, so a
    caller without a key hears 401 first); at once where it has none.
    """
    allowed = frozenset(p.name for p in route.params if p.where == "query")
    repeatable = frozenset(p.name for p in route.params if p.where == "query" and p.repeatable)

    async def handler(request: web.Request) -> web.StreamResponse:
        request[QUERY_NAMES] = allowed
        request[QUERY_REPEATABLE] = repeatable
        if not route.auth:
            check_query(request)
        return await route.handler(request)

    return handler


def _lifetime(
    svc: Services, config: Config, interval: float | None, relay: bool
) -> Callable[[web.Application], AsyncIterator[None]]:
    async def lifetime(app: web.Application) -> AsyncIterator[None]:
        tasks = [asyncio.create_task(sweep_forever(svc, interval))] if interval else []
        sender: WebhookSender | None = None
        if relay:
            settings = config.relay()
            sender = WebhookSender(
                allow_private=config.allow_private_urls, timeout=settings.timeout
            )
            # SQLite: one relay per database file at a time (a lease); PostgreSQL:
            # every process's relay claims its own batches.
            worker = Relay(
                svc, sender, settings, exclusive=not config.on_postgres(),
                writable=writable_providers(svc),
            )  # fmt: skip
            tasks.append(asyncio.create_task(worker.run_forever()))
            # The holds' events in the bound calendars, and the calendars' busy time.
            writer = CalendarWriter(svc, settings)
            tasks.append(asyncio.create_task(writer.run_forever()))
            syncer = ProviderSync(svc, min(1.0, settings.interval * 5))
            tasks.append(asyncio.create_task(syncer.run_forever()))
        await svc.completions.start()
        yield
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if sender is not None:
            await sender.close()
        await svc.providers.close()
        await svc.completions.close()
        await svc.storms.flush()
        await svc.store.close()

    return lifetime
