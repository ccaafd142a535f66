"""Running the server: one process, or N processes sharing one port.

With ``--workers N`` the parent migrates the schema once, then starts N worker
processes and supervises them: each binds the same port with SO_REUSEPORT and
the kernel spreads connections among them; the parent announces once all
listen, and stops them all when it is told to or when one of them stops. The
workers pool their metrics in ``config.metrics_dir`` (api/cli.py makes it). Each
has its own store connection pool and its own sweeper; the store makes them
safe beside each other (SQLite: one writer at a time per file; PostgreSQL: one
writer at a time per tenant).
"""

from __future__ import annotations

import asyncio
import multiprocessing
import multiprocessing.process
import multiprocessing.queues
import os
import queue
import shutil
import signal
import sys
from collections.abc import Callable, Sequence

from aiohttp import web

from slotward.api.app import bootstrap, build_app, migrate, open_store
from slotward.api.auth import create_key
from slotward.api.config import Config
from slotward.api.logs import configure_logging
from slotward.engine.clock import SystemClock, TimeOrderedIds
from slotward.engine.model import Principal

__all__ = ["serve"]


def serve(config: Config, *, demo_key: bool, workers: int) -> None:
    """Serve until SIGINT or SIGTERM; with ``workers`` > 1, in that many processes."""
    if workers <= 1:
        asyncio.run(_serve_one(config, demo_key=demo_key, reuse_port=False))
        return
    if config.metrics_dir is None:
        raise ValueError("several workers need config.metrics_dir (api/cli.py sets it up)")
    asyncio.run(migrate(config))  # once, before the processes race to do it
    _supervise(config, demo_key=demo_key, workers=workers)


def _supervise(config: Config, *, demo_key: bool, workers: int) -> None:
    """Start the workers, announce once all listen, and stop them all together."""
    context = multiprocessing.get_context("spawn")
    ready = context.Queue()
    children = [context.Process(target=_child, args=(config, ready)) for _ in range(workers)]
    for child in children:
        child.start()
    try:
        asyncio.run(_supervise_async(config, children, ready, demo_key=demo_key))
    finally:
        for child in children:
            child.terminate()  # SIGTERM: each stops cleanly
        for child in children:
            child.join(timeout=30)
        ready.close()
    if any(c.exitcode not in (0, -signal.SIGTERM) for c in children):
        raise SystemExit("slotward: a worker process stopped; stopped the others")


async def _supervise_async(
    config: Config,
    children: Sequence[multiprocessing.process.BaseProcess],
    ready: multiprocessing.queues.Queue[int],
    *,
    demo_key: bool,
) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    listening = 0
    while listening < len(children):  # until each worker has bound the port
        if stop.is_set() or not all(c.is_alive() for c in children):
            return
        try:
            ready.get(timeout=0.05)
            listening += 1
        except queue.Empty:
            await asyncio.sleep(0)
    print(f"slotward serving http://{config.host}:{config.port} "
          f"(database {config.db_url}, {len(children)} processes)")  # fmt: skip
    if demo_key:
        print(f"API key (tenant demo, agent demo-agent): {await _demo_key(config)}")
    sys.stdout.flush()
    watcher = asyncio.create_task(_watch(lambda: all(c.is_alive() for c in children), stop))
    try:
        await stop.wait()
    finally:
        watcher.cancel()


async def _demo_key(config: Config) -> str:
    store = await open_store(config)
    try:
        demo = Principal("demo", "demo-agent", "agent", 50)
        made = await store.write(lambda uow: create_key(uow, demo, SystemClock(), TimeOrderedIds()))
    finally:
        await store.close()
    return made.secret


def _child(config: Config, ready: multiprocessing.queues.Queue[int]) -> None:
    configure_logging(config)  # a spawned process starts with logging unconfigured
    parent = os.getppid()
    # A worker must not outlive its parent (kill -9 included), or it would go
    # on serving the port beside a new server.
    asyncio.run(
        _serve_one(config, demo_key=False, reuse_port=True, announce=False,
                   watch=lambda: os.getppid() == parent, ready=lambda: ready.put(os.getpid()))
    )  # fmt: skip
    if os.getppid() != parent and config.metrics_dir is not None:
        # The parent died without cleaning up (kill -9): the orphans do it.
        shutil.rmtree(config.metrics_dir, ignore_errors=True)


async def _serve_one(
    config: Config,
    *,
    demo_key: bool,
    reuse_port: bool,
    announce: bool = True,
    workers: int = 1,
    watch: Callable[[], bool] | None = None,
    ready: Callable[[], None] | None = None,
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
        if ready is not None:
            ready()
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
