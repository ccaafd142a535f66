"""The one place everything is wired: the store, the clock and the services.

No aiohttp here: the HTTP app (api/http/app.py), the CLI and, later, MCP all
build their :class:`Services` with :func:`bootstrap`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from slotward.adapters.providers.registry import load_providers
from slotward.adapters.random_ids import PooledIds
from slotward.adapters.store.postgres.notify import PgSignals
from slotward.adapters.store.postgres.store import PostgresStore
from slotward.adapters.store.sqlite.store import SqliteStore
from slotward.adapters.webhooks.guard import UrlGuard
from slotward.api.completions import Completions
from slotward.api.config import Config, StreamSettings
from slotward.api.inflight import InFlight
from slotward.api.keycache import KeyCache
from slotward.api.metrics import Metrics
from slotward.api.providers import ProviderHub
from slotward.api.ratelimit import RateLimiter
from slotward.api.replays import KnownCreates
from slotward.api.secretbox import SecretBox
from slotward.api.seen import SeenCreates
from slotward.api.sessions import DashboardSessions
from slotward.api.storms import StormWatch
from slotward.api.waits import settled_waits
from slotward.engine.clock import SystemClock
from slotward.engine.ports import Clock, IdGenerator, Store, UnitOfWork
from slotward.engine.rules.policy import Policy

__all__ = ["Services", "bootstrap", "migrate", "open_store"]

T = TypeVar("T")


@dataclass(frozen=True)
class Services:
    """What the application services (api/service.py) need."""

    store: Store
    clock: Clock
    ids: IdGenerator
    policy: Policy
    keys: KeyCache
    inflight: InFlight
    metrics: Metrics
    storms: StormWatch
    completions: Completions
    box: SecretBox  # seals webhook secrets at rest (SLOTWARD_SECRET_KEY)
    urls: UrlGuard  # the SSRF check of webhook and provider URLs
    providers: ProviderHub  # the calendar adapters, and the reads of calendars
    sessions: DashboardSessions  # the dashboard's sign-ins (cookies standing for keys)
    # The creates this process answered: which are looked up before their write.
    seen: SeenCreates = field(default_factory=SeenCreates)
    # The creates this process answered, by their request: replayed cheaply (api/replays.py).
    known: KnownCreates = field(default_factory=KnownCreates)
    stream: StreamSettings = field(default_factory=StreamSettings)  # the dashboard's live feed

    async def peek(self, fn: Callable[[UnitOfWork], T], *, alone: bool = False) -> T:
        """A read of a few point lookups, run at once where the store allows it
        (SQLite: on this thread, SqliteStore.peek); otherwise an ordinary read.
        ``alone``: it is one statement, which SQLite runs outside a transaction."""
        if isinstance(self.store, SqliteStore):
            return await self.store.peek(fn, alone=alone)
        return await self.store.read(fn)


async def open_store(config: Config) -> Store:
    """The store named by ``config.db_url``, migrated to the current schema."""
    max_hold = config.policy().max_hold
    if config.on_postgres():
        return await PostgresStore.open(
            config.db_url, max_hold, config.waits(), pool_size=config.db_pool_size
        )
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
    ids = ids or PooledIds()  # their random bits drawn a pool at a time
    policy = config.policy()
    metrics = Metrics(config.metrics_dir)
    box = SecretBox.from_config(config.secret_key, config.secret_key_old)
    calendars = config.providers()
    keys = KeyCache(
        chosen,
        config.key_cache_seconds,
        RateLimiter(
            config.rate_limit, config.rate_burst or math.ceil(2 * config.rate_limit), clock
        ),
        config.key_hasher(),
        clock,
    )
    return Services(
        store=chosen,
        clock=clock,
        ids=ids,
        policy=policy,
        keys=keys,
        inflight=InFlight(config.inflight_wait_ms / 1000),
        metrics=metrics,
        storms=StormWatch(chosen, clock, ids, policy, metrics),
        # SQLite has no way to signal other processes on its file: their
        # completions are found by the waiters' fallback look.
        completions=Completions(
            PgSignals(config.db_url) if config.on_postgres() else None,
            config.wait_poll_seconds,
            lambda names: chosen.read(lambda uow: settled_waits(uow, names, clock)),
        ),
        box=box,
        urls=UrlGuard(allow_private=config.allow_private_urls),
        providers=ProviderHub(load_providers(calendars.settings), box, calendars),
        sessions=DashboardSessions(chosen, keys, clock),
        stream=config.stream(),
    )
