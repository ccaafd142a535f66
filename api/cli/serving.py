"""Running the server: one process, or N processes sharing one port.

With ``--workers N`` the parent migrates the schema once, binds and listens on
the port itself, then starts N worker processes that all accept from that one
socket, and supervises them: it announces once all serve, and stops them all
when it is told to or when one of them stops. The parent owning the port means
a second server cannot silently share it (SO_REUSEPORT would let it), and
``--port 0`` gives one port, not one per worker. The workers pool their metrics
in ``config.metrics_dir`` (api/cli/main.py makes it). Each has its own store
connection pool and its own sweeper; the store makes them safe beside each
other (SQLite: one writer at a time per file; PostgreSQL: one at a time per
attendee for creates, per tenant for the other writes: docs/concurrency.md).

Every process runs on the event loop ``config.event_loop`` names (api/config.py):
uvloop unless ``SLOTWARD_EVENT_LOOP=asyncio``.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import multiprocessing
import multiprocessing.process
import multiprocessing.queues
import os
import queue
import shutil
import signal
import socket
import sys
from collections.abc import Callable, Coroutine, Iterator, Sequence
from dataclasses import replace
from typing import Any

import uvloop
from aiohttp import web

from slotward.api import service
from slotward.api.bootstrap import bootstrap, migrate, open_store
from slotward.api.config import Config
from slotward.api.http.app import build_app
from slotward.api.http.edges import build_runner
from slotward.api.http.fdlimit import fit_connections, quiet_accept_errors
from slotward.api.logs import configure_logging
from slotward.engine.clock import SystemClock, TimeOrderedIds
from slotward.engine.model import Principal
from slotward.engine.ports import Clock, IdGenerator, Store

__all__ = ["STOP_SECONDS", "YOUNG_OBJECTS", "run", "serve", "settle_heap", "stop_workers"]

STOP_SECONDS = 20  # how long open requests may finish when the server stops
# Container objects allocated (net) before a young collection. Python's 700
# meant one every few requests under load; a cycle left by a request waits a
# little longer to be freed, and no object is freed later by refcount.
YOUNG_OBJECTS = 10_000


def serve(config: Config, *, demo_key: bool, workers: int) -> None:
    """Serve until SIGINT, SIGTERM or SIGHUP; with ``workers`` > 1, in that many processes."""
    if workers <= 1:
        run(config, _serve_one(config, demo_key=demo_key))
        return
    if config.metrics_dir is None:
        raise ValueError("several workers need config.metrics_dir (api/cli/main.py sets it up)")
    run(config, migrate(config))  # once, before the processes race to do it
    with _listen(config) as sock:
        port = sock.getsockname()[1]
        _supervise(replace(config, port=port), sock, demo_key=demo_key, workers=workers)


def settle_heap() -> None:
    """Once started: what was made so far (modules, compiled statements, the
    app and its services) lives as long as the process, so it is frozen out of
    the collector's reach, and young collections are made rarer.

    Measured (gc callbacks in a server under `slotward bench throughput`, some
    9,000 calls): full collections walked the whole startup heap, 100-230 ms
    each every few seconds (a p99 of their own), 99 ms of CPU the longest;
    frozen, 7-56 ms with 14 ms of CPU. Young collections cost ~25 us of CPU a
    call at Python's threshold of 700.
    """
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_OBJECTS, middle, old)


def run(config: Config, main: Coroutine[Any, Any, None]) -> None:
    """``asyncio.run(main)``, on the event loop ``config.event_loop`` names.

    uvloop costs less per request than asyncio's own loop: its transports and
    its polling are libuv, in C (measured: about a fifth less server CPU per
    replay, a tenth per create, SQLite, one process, 64 agents).
    """
    factory = uvloop.new_event_loop if config.event_loop == "uvloop" else None
    with asyncio.Runner(loop_factory=factory) as runner:
        runner.run(main)


@contextlib.contextmanager
def _listen(config: Config) -> Iterator[socket.socket]:
    """The server's one listening socket (a busy port fails here, before any worker)."""
    sock = socket.create_server((config.host, config.port), backlog=1024)
    try:
        yield sock
    finally:
        sock.close()


def _supervise(config: Config, sock: socket.socket, *, demo_key: bool, workers: int) -> None:
    """Start the workers, announce once all serve, and stop them all together."""
    context = multiprocessing.get_context("spawn")
    ready = context.Queue()
    parent = os.getpid()
    children = [
        context.Process(target=_child, args=(config, sock, parent, ready)) for _ in range(workers)
    ]
    for child in children:
        child.start()  # the socket travels to the child with it
    try:
        run(config, _supervise_async(config, children, ready, demo_key=demo_key))
    finally:
        stop_workers(children)
        ready.close()
    if any(c.exitcode not in (0, -signal.SIGTERM) for c in children):
        raise SystemExit("slotward: a worker process stopped; stopped the others")


def stop_workers(children: Sequence[multiprocessing.process.BaseProcess]) -> None:
    """SIGTERM every started worker (each stops cleanly), SIGKILL what outlives the grace."""
    started = [c for c in children if c.pid is not None]
    for child in started:
        child.terminate()
    for child in started:
        child.join(timeout=STOP_SECONDS + 10)
        if child.is_alive():
            child.kill()
            child.join()


async def _supervise_async(
    config: Config,
    children: Sequence[multiprocessing.process.BaseProcess],
    ready: multiprocessing.queues.Queue[int],
    *,
    demo_key: bool,
) -> None:
    stop = _stop_on_signals()
    serving = 0
    while serving < len(children):  # until each worker serves
        if stop.is_set() or not all(c.is_alive() for c in children):
            return
        try:
            ready.get(timeout=0.05)
            serving += 1
        except queue.Empty:
            await asyncio.sleep(0)
    print(f"slotward serving http://{config.host}:{config.port} "
          f"(database {config.db_url}, {len(children)} processes)")  # fmt: skip
    if demo_key:
        store = await open_store(config)
        try:
            await _announce_demo_keys(store, SystemClock(), TimeOrderedIds(), config)
        finally:
            await store.close()
    sys.stdout.flush()
    watcher = asyncio.create_task(_watch(lambda: all(c.is_alive() for c in children), stop))
    try:
        await stop.wait()
    finally:
        watcher.cancel()


def _stop_on_signals() -> asyncio.Event:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        loop.add_signal_handler(sig, stop.set)
    return stop


# The demo tenant's people: the agent books, the reviewer approves in the
# dashboard, the admin sets the approval policy (README "The two commands").
_DEMO = (
    ("API key", Principal("demo", "demo-agent", "agent", 50)),
    ("Reviewer key", Principal("demo", "demo-reviewer", "reviewer", 0)),
    ("Admin key", Principal("demo", "demo-admin", "admin", 100)),
)


async def _announce_demo_keys(store: Store, clock: Clock, ids: IdGenerator, config: Config) -> None:
    """Mint the demo tenant's keys and print them, the agent's first (on line 2)."""
    for label, who in _DEMO:
        made = await service.issue_key(store, who, clock, ids, config.key_hasher())
        print(f"{label} (tenant demo, {who.role} {who.agent_id}): {made.secret}")
    print(f"Dashboard: http://{config.host}:{config.port}/dashboard (sign in with the reviewer"
          " or admin key)")  # fmt: skip


def _child(
    config: Config, sock: socket.socket, parent: int, ready: multiprocessing.queues.Queue[int]
) -> None:
    configure_logging(config)  # a spawned process starts with logging unconfigured
    # A worker must not outlive its parent (kill -9 included, even during its
    # start: ``parent`` is the pid the parent had, not whoever adopted us).
    run(
        config,
        _serve_one(config, demo_key=False, sock=sock, watch=lambda: os.getppid() == parent,
                   ready=lambda: ready.put(os.getpid()))
    )  # fmt: skip
    if os.getppid() != parent and config.metrics_dir is not None:
        # The parent died without cleaning up (kill -9): the orphans do it.
        shutil.rmtree(config.metrics_dir, ignore_errors=True)


async def _serve_one(
    config: Config,
    *,
    demo_key: bool,
    sock: socket.socket | None = None,
    watch: Callable[[], bool] | None = None,
    ready: Callable[[], None] | None = None,
) -> None:
    """Serve ``config``'s port, or a worker's share of ``sock``.

    A single process binds first, then announces: a busy port fails before
    anything is printed. A worker announces nothing; its parent does.
    """
    config = fit_connections(config)  # before the store opens its files
    quiet_accept_errors(asyncio.get_running_loop())
    services = await bootstrap(config)
    runner = build_runner(build_app(services, config), config, shutdown_timeout=STOP_SECONDS)
    await runner.setup()
    settle_heap()
    stop = _stop_on_signals()
    watcher: asyncio.Task[None] | None = None
    try:
        site: web.BaseSite = (
            web.TCPSite(runner, config.host, config.port) if sock is None
            else web.SockSite(runner, sock)
        )  # fmt: skip
        await site.start()
        if ready is not None:
            ready()
        if sock is None:
            port = runner.addresses[0][1]  # the port bound: --port 0 picks one
            print(f"slotward serving http://{config.host}:{port} "
                  f"(database {config.db_url})")  # fmt: skip
        if demo_key:
            port = config.port if sock is not None else runner.addresses[0][1]
            shown = replace(config, port=port)
            await _announce_demo_keys(services.store, services.clock, services.ids, shown)
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
