"""The aiohttp application and the one place everything is wired (bootstrap)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
from collections.abc import AsyncIterator, Callable

from aiohttp import web

from slotward.adapters.store.postgres.notify import PgSignals
from slotward.adapters.store.postgres.store import PostgresStore
from slotward.adapters.store.sqlite.store import SqliteStore
from slotward.api.completions import Completions
from slotward.api.config import Config
from slotward.api.http.context import SERVICES, Services
from slotward.api.http.jsonbody import MAX_BODY_BYTES
from slotward.api.http.openapi import build_openapi
from slotward.api.http.other_handlers import OPENAPI
from slotward.api.http.params import QUERY_NAMES, QUERY_REPEATABLE, check_query, refuse_nul
from slotward.api.http.problems import problem_middleware
from slotward.api.http.routes import Handler, Route
from slotward.api.http.table import ROUTES
from slotward.api.http.telemetry import observe_middleware
from slotward.api.inflight import InFlight
from slotward.api.keycache import KeyCache
from slotward.api.metrics import Metrics
from slotward.api.ratelimit import RateLimiter
from slotward.api.storms import StormWatch
from slotward.api.workers.sweeper import sweep_forever
from slotward.engine.clock import SystemClock, TimeOrderedIds
from slotward.engine.ports import Clock, IdGenerator, Store
from slotward.engine.usecases.executions import settled

__all__ = ["bootstrap", "build_app", "migrate", "open_store"]


def _on_postgres(config: Config) -> bool:
    return config.db_url.startswith(("postgresql", "postgres"))


async def open_store(config: Config) -> Store:
    """The store named by ``config.db_url``, migrated to the current schema."""
    max_hold = config.policy().max_hold
    if _on_postgres(config):
        return await PostgresStore.open(config.db_url, max_hold, config.waits())
    return SqliteStore.open(config.db_url, max_hold, config.waits())


async def migrate(config: Config) -> None:
    """Bring the schema of ``config.db_url`` up to date, then let go of it."""
    store = await open_store(config)
    await store.close()


async def bootstrap(
    config: Config,
    *,
    store: Store | None = None,
    clock: Clock | None = None,
    ids: IdGenerator | None = None,
) -> Services:
    """Wire the adapters into the engine; tests pass their own clock or store."""
    chosen = store if store is not None else await open_store(config)
    clock = clock or SystemClock()
    ids = ids or TimeOrderedIds()
    policy = config.policy()
    metrics = Metrics(config.metrics_dir)
    return Services(
        store=chosen,
        clock=clock,
        ids=ids,
        policy=policy,
        keys=KeyCache(
            chosen,
            config.key_cache_seconds,
            RateLimiter(
                config.rate_limit, config.rate_burst or math.ceil(2 * config.rate_limit), clock
            ),
            config.key_hasher(),
            clock,
        ),
        inflight=InFlight(config.inflight_wait_ms / 1000),
        metrics=metrics,
        storms=StormWatch(chosen, clock, ids, policy, metrics),
        # SQLite has no way to signal other processes on its file: their
        # completions are found by the waiters' fallback look.
        completions=Completions(
            PgSignals(config.db_url) if _on_postgres(config) else None,
            config.wait_poll_seconds,
            lambda names: chosen.read(lambda uow: settled(uow, names, clock)),
        ),
    )


def build_app(services: Services, config: Config, *, sweep: bool = True) -> web.Application:
    """The HTTP application. It closes the store when it shuts down."""
    app = web.Application(
        middlewares=[problem_middleware, observe_middleware, refuse_nul],
        client_max_size=MAX_BODY_BYTES + 1024,
    )
    app[SERVICES] = services
    app[OPENAPI] = json.dumps(build_openapi(ROUTES), separators=(",", ":")).encode()
    for route in ROUTES:
        app.router.add_route(route.method, route.path, _strict_query(route))
    app.cleanup_ctx.append(_lifetime(services, config.sweep_interval_seconds if sweep else None))
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
    svc: Services, interval: float | None
) -> Callable[[web.Application], AsyncIterator[None]]:
    async def lifetime(app: web.Application) -> AsyncIterator[None]:
        task = asyncio.create_task(sweep_forever(svc, interval)) if interval else None
        await svc.completions.start()
        yield
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await svc.completions.close()
        await svc.storms.flush()
        await svc.store.close()

    return lifetime
