"""Signals between server processes over PostgreSQL LISTEN/NOTIFY.

One connection per process, outside the store's pools: it LISTENs on
``slotward_completions`` and sends this process's topics with ``pg_notify``
(batched: one statement for every topic queued meanwhile). A topic is sent
right after the transaction it announces has committed, so a listener never
hears of a completion it cannot read yet. The listener skips its own topics
(the process woke its waiters itself).

A lost connection (the server restarted, ``pg_terminate_backend``, a network
cut noticed by a ping every ``PING_SECONDS``) is reopened with backoff; after
each (re)connect every waiter of the process is woken once, since signals may
have been missed meanwhile, and waiters keep their slow fallback poll. A crash
between a commit and its NOTIFY loses that signal: the fallback covers it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

import asyncpg  # type: ignore[import-untyped]  # ships no type information
from sqlalchemy.dialects.postgresql.asyncpg import PGDialect_asyncpg
from sqlalchemy.engine import make_url

__all__ = ["CHANNEL", "PgSignals"]

log = logging.getLogger("slotward.store")

CHANNEL = "slotward_completions"
PING_SECONDS = 10.0  # an idle listener checks its connection this often
_TIMEOUT_SECONDS = 5.0  # to connect, or to answer a ping
_BACKOFF_SECONDS = (0.1, 0.5, 1.0, 2.0, 5.0)
_MAX_PENDING = 10_000  # topics queued while disconnected; beyond, the fallback poll
_LOST = (OSError, TimeoutError, asyncpg.PostgresError, asyncpg.InterfaceError)


def _connect_args(url: str) -> dict[str, Any]:
    """asyncpg's arguments for a SQLAlchemy URL, as the store's engine reads it."""
    parsed = make_url(url).set(drivername="postgresql+asyncpg")
    dialect = PGDialect_asyncpg()  # type: ignore[no-untyped-call]
    _, kwargs = dialect.create_connect_args(parsed)  # type: ignore[no-untyped-call]
    return dict(kwargs)


class PgSignals:
    def __init__(self, url: str, channel: str = CHANNEL) -> None:
        self._connect = _connect_args(url)
        self._channel = channel
        self._pending: set[str] = set()
        self._wake = asyncio.Event()  # something to send, or the connection was lost
        self._lost = False
        self._proven = False  # the current connection has listened and answered since
        self._task: asyncio.Task[None] | None = None
        self._receive: Callable[[str | None], None] = lambda _topic: None
        self.backend_pid: int | None = None  # the listening server process, while connected
        self.connects = 0  # connections made so far (observable for tests)

    async def start(self, receive: Callable[[str | None], None]) -> None:
        self._receive = receive
        self._task = asyncio.create_task(self._run(), name="slotward-listener")

    def send(self, topic: str) -> None:
        if len(self._pending) < _MAX_PENDING:
            self._pending.add(topic)
        self._wake.set()

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task  # shutting down: whatever ended the task is logged already
            self._task = None

    async def _run(self) -> None:
        failures = 0
        while True:
            try:
                conn = await asyncpg.connect(
                    **self._connect, timeout=_TIMEOUT_SECONDS,
                    server_settings={"application_name": "slotward-listener"},
                )  # fmt: skip
            except _LOST as exc:
                log.warning(
                    "completion listener: cannot connect (%s); retrying", type(exc).__name__
                )
            else:
                self._proven = False
                try:
                    await self._serve(conn)
                    log.warning("completion listener lost; reconnecting")
                except _LOST as exc:
                    log.warning("completion listener lost (%s); reconnecting", type(exc).__name__)
                except Exception:  # a bug here must not end cross-process wake-ups for good
                    log.exception("completion listener failed; reconnecting")
                finally:
                    self.backend_pid = None
                    conn.terminate()
                if self._proven:
                    # Only a connection that listened and then answered resets the
                    # backoff: a server that accepts connections but refuses LISTEN
                    # (a standby, a transaction pooler) is not retried ten times a second.
                    failures = 0
            await asyncio.sleep(_BACKOFF_SECONDS[min(failures, len(_BACKOFF_SECONDS) - 1)])
            failures += 1

    async def _serve(self, conn: asyncpg.Connection) -> None:
        """Listen and send on ``conn`` until it is lost."""
        pid = conn.get_server_pid()
        self._lost = False

        def lost(_conn: object) -> None:
            self._lost = True
            self._wake.set()

        def heard(_conn: object, sender: int, _channel: str, payload: str) -> None:
            if sender != pid:
                self._receive(payload)

        conn.add_termination_listener(lost)
        await conn.add_listener(self._channel, heard)
        self.backend_pid = pid
        self.connects += 1
        self._receive(None)  # whatever was signalled while nobody listened
        while not self._lost:
            self._wake.clear()
            if self._pending:
                batch = sorted(self._pending)
                self._pending.clear()
                await conn.execute(
                    "SELECT pg_notify($1, t) FROM unnest($2::text[]) AS t", self._channel, batch
                )
                self._proven = True
                continue
            try:
                await asyncio.wait_for(self._wake.wait(), PING_SECONDS)
            except TimeoutError:
                await conn.fetchval("SELECT 1", timeout=_TIMEOUT_SECONDS)
                self._proven = True
