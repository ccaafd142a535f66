"""Serving a baseline server (echo, reference): one process, or N sharing one port.

The baselines scale the way ``slotward serve --workers`` does (api/cli/serving.py),
so a ratio against them compares like with like: with N > 1 the parent binds
and listens on the port itself, starts N spawned worker processes that all
accept from that one socket, announces once every worker serves, and stops
them all (SIGTERM, then SIGKILL after a grace period) when it is told to
(SIGINT, SIGTERM) or when one of them stops. A worker also stops when its
parent is gone. Its collector is settled as slotward's is once serving
(frozen startup heap, rarer young collections). No access log, no
middleware: a baseline does nothing else.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import multiprocessing.connection
import multiprocessing.process
import multiprocessing.queues
import os
import queue
import signal
import socket
import threading
from collections.abc import Awaitable, Callable, Sequence

from aiohttp import web

# The same grace and the same stop as slotward's own workers, and the same
# collector settings once started.
from slotward.api.cli.serving import STOP_SECONDS, settle_heap, stop_workers

__all__ = ["AppFactory", "add_serving_arguments", "health_handler", "serve"]


# Builds the app in the process that serves it. With workers it travels to
# spawned processes, so it must pickle: a module-level function, or a
# functools.partial of one with plain arguments.
AppFactory = Callable[[], Awaitable[web.Application]]


async def health_handler(request: web.Request) -> web.Response:
    """200 ``{"status": "ok", "process": pid}``: the pid tells which worker answered."""
    return web.json_response({"status": "ok", "process": os.getpid()})


def add_serving_arguments(parser: argparse.ArgumentParser) -> None:
    """``--port``, ``--host`` and ``--workers``, as every baseline server takes them."""
    parser.add_argument("--port", type=int, required=True, help="0 picks a free port")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--workers", type=int, default=1, help="server processes (default 1)")


def serve(factory: AppFactory, *, name: str, host: str, port: int, workers: int) -> None:
    """Serve until SIGINT or SIGTERM; with ``workers`` > 1, in that many processes."""
    if workers <= 1:
        asyncio.run(_serve_one(factory, name=name, host=host, port=port))
        return
    # The parent owns the port: a busy port fails here, before any worker.
    sock = socket.create_server((host, port), backlog=1024)
    try:
        _supervise(factory, sock, name=name, workers=workers)
    finally:
        sock.close()


def _announce(name: str, host: str, port: int, workers: int) -> None:
    processes = "1 process" if workers == 1 else f"{workers} processes"
    print(f"{name} serving http://{host}:{port} ({processes})", flush=True)


def _supervise(factory: AppFactory, sock: socket.socket, *, name: str, workers: int) -> None:
    """Start the workers, announce once all serve, and stop them all together."""
    context = multiprocessing.get_context("spawn")
    ready: multiprocessing.queues.Queue[int] = context.Queue()
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set())
                for sig in (signal.SIGINT, signal.SIGTERM)}  # fmt: skip
    children = [
        context.Process(target=_child, args=(factory, sock, os.getpid(), ready))
        for _ in range(workers)
    ]
    try:
        for child in children:
            child.start()  # the socket travels to the child with it
        if _all_ready(children, ready, stop):
            host, port = sock.getsockname()[:2]
            _announce(name, host, port, workers)
            while not stop.is_set() and all(c.is_alive() for c in children):
                multiprocessing.connection.wait([c.sentinel for c in children], timeout=0.2)
    finally:
        stop_workers(children)
        ready.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if any(c.exitcode not in (0, -signal.SIGTERM) for c in children):
        raise SystemExit(f"{name}: a worker process stopped; stopped the others")


def _all_ready(
    children: Sequence[multiprocessing.process.BaseProcess],
    ready: multiprocessing.queues.Queue[int],
    stop: threading.Event,
) -> bool:
    """Wait until every worker serves; False if told to stop or one died first."""
    serving = 0
    while serving < len(children):
        if stop.is_set() or not all(c.is_alive() for c in children):
            return False
        try:
            ready.get(timeout=0.05)
            serving += 1
        except queue.Empty:
            pass
    return True


def _child(
    factory: AppFactory, sock: socket.socket, parent: int, ready: multiprocessing.queues.Queue[int]
) -> None:
    asyncio.run(_serve_one(factory, name="", sock=sock, parent=parent, ready=ready))


async def _serve_one(
    factory: AppFactory,
    *,
    name: str,
    host: str = "",
    port: int = 0,
    sock: socket.socket | None = None,
    parent: int | None = None,
    ready: multiprocessing.queues.Queue[int] | None = None,
) -> None:
    """Serve ``host:port``, or a worker's share of ``sock``, until told to stop."""
    runner = web.AppRunner(
        await factory(), handle_signals=False, access_log=None, shutdown_timeout=STOP_SECONDS
    )
    await runner.setup()
    settle_heap()
    stop = _stop_on_signals()
    watcher: asyncio.Task[None] | None = None
    try:
        site: web.BaseSite = (
            web.TCPSite(runner, host, port) if sock is None else web.SockSite(runner, sock)
        )
        await site.start()
        if ready is not None:
            ready.put(os.getpid())
        if sock is None:
            _announce(name, host, runner.addresses[0][1], 1)
        if parent is not None:
            watcher = asyncio.create_task(_watch_parent(parent, stop))
        await stop.wait()
    finally:
        if watcher is not None:
            watcher.cancel()
        await runner.cleanup()


def _stop_on_signals() -> asyncio.Event:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    return stop


async def _watch_parent(parent: int, stop: asyncio.Event) -> None:
    """Stop when the parent is gone (kill -9 included): nothing signals that to us."""
    while os.getppid() == parent:  # noqa: ASYNC110
        await asyncio.sleep(0.5)
    stop.set()
