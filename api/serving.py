"""Running the server: one process, or N processes sharing one port.

With ``--workers N`` the parent migrates the schema once, then N processes
(the parent and N-1 children) each bind the same port with SO_REUSEPORT and
the kernel spreads connections among them. Each has its own store connection
pool and its own sweeper; the store makes them safe beside each other (SQLite:
one writer at a time per file; PostgreSQL: one writer at a time per tenant).
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import sys
from collections.abc import Callable

from aiohttp import web

from slotward.api.app import bootstrap, build_app, migrate
from slotward.api.auth import create_key
from slotward.api.config import Config
from slotward.api.logs import configure_logging
from slotward.engine.model import Principal

__all__ = ["serve"]


def serve(config: Config, *, demo_key: bool, workers: int) -> None:
    """Serve until SIGINT or SIGTERM; with ``workers`` > 1, in that many processes."""
    if workers <= 1:
        asyncio.run(_serve_one(config, demo_key=demo_key, reuse_port=False))
        return
    asyncio.run(migrate(config))  # once, before the processes race to do it
    context = multiprocessing.get_context("spawn")
    children = [context.Process(target=_child, args=(config,)) for _ in range(workers - 1)]
    for child in children:
        child.start()
    try:
        asyncio.run(
            _serve_one(config, demo_key=demo_key, reuse_port=True, workers=workers,
                       watch=lambda: all(c.is_alive() for c in children))
        )  # fmt: skip
    finally:
        for child in children:
            child.terminate()  # SIGTERM: each stops cleanly
        for child in children:
            child.join(timeout=30)
    if any(c.exitcode not in (0, -signal.SIGTERM) for c in children):
        raise SystemExit("slotward: a worker process died; stopped the others")


def _child(config: Config) -> None:
    configure_logging(config)  # a spawned process starts with logging unconfigured
    parent = os.getppid()
    # A worker must not outlive its parent (kill -9 included), or it would go
    # on serving the port beside a new server.
    asyncio.run(
        _serve_one(config, demo_key=False, reuse_port=True, announce=False,
                   watch=lambda: os.getppid() == parent)
    )  # fmt: skip


async def _serve_one(
    config: Config,
    *,
    demo_key: bool,
    reuse_port: bool,
    announce: bool = True,
    workers: int = 1,
    watch: Callable[[], bool] | None = None,
) -> None:
    """Bind first, then announce: a busy port fails before anything is printed."""
    services = await bootstrap(config)
    # access_log=None: the observe middleware writes the one access line per request.
    runner = web.AppRunner(build_app(services, config), handle_signals=False, access_log=None)
    await runner.setup()
    stop = asyncio.Event()
    watcher: asyncio.Task[None] | None = None
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        site = web.TCPSite(runner, config.host, config.port, reuse_port=reuse_port or None)
        await site.start()
        if announce:
            many = f", {workers} processes" if workers > 1 else ""
            print(f"slotward serving http://{config.host}:{config.port} "
                  f"(database {config.db_url}{many})")  # fmt: skip
        if demo_key:
            demo = Principal("demo", "demo-agent", "agent", 50)
            made = await services.store.write(
                lambda uow: create_key(uow, demo, services.clock, services.ids)
            )
            print(f"API key (tenant demo, agent demo-agent): {made.secret}")
        sys.stdout.flush()
        if watch is not None:
            watcher = asyncio.create_task(_watch(watch, stop))
        await stop.wait()
    finally:
        if watcher is not None:
            watcher.cancel()
        await runner.cleanup()


async def _watch(healthy: Callable[[], bool], stop: asyncio.Event) -> None:
    """Stop when the process group falls apart (a parent or a sibling gone)."""
    # Nothing signals a parent's death or a sibling's exit to us: poll.
    while healthy():  # noqa: ASYNC110
        await asyncio.sleep(0.5)
    stop.set()
