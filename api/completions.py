"""Wakes the callers waiting (``wait_ms``) for an execution to complete, and
those waiting (``wait``) for an approval's decision.

A waiter registers before it first looks at the store, so a completion that
commits between that look and the wait still wakes it. A completion in this
process wakes its waiters at once (the handler calls :meth:`Completions.notify`
after the transaction committed); one in another process arrives through the
:class:`~slotward.engine.ports.Signals` transport when there is one
(PostgreSQL LISTEN/NOTIFY, adapters/store/postgres/notify.py). Signals can be lost,
and SQLite has no transport at all (``serve --workers N`` on one file), so
every ``poll_seconds`` the process looks, in one read for all its waiters,
which of the awaited keys have settled, and wakes theirs: a slow fallback
whose cost does not grow with the number of waiters (a read each per waiter,
ten times a second, slowed other tenants down before).

Approvals' long poll reuses it (api/approvals.py): a decision notifies the
name :func:`~slotward.api.waits.wait_name` gives its approval, and the
fallback look reads executions' keys and approvals alike
(:func:`~slotward.api.waits.settled_waits`).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
from collections.abc import Awaitable, Callable, Collection, Iterator, Sequence

from slotward.engine.errors import Unavailable
from slotward.engine.ports import Signals

__all__ = ["Completions", "Look", "Waiter", "topic"]

log = logging.getLogger("slotward.api")

Name = tuple[str, str]  # (tenant, key)
# Which of these names have settled (their waiters should look again)?
Look = Callable[[Sequence[Name]], Awaitable[Collection[Name]]]
_LOOK_BATCH = 500  # names per read of the fallback


def topic(tenant: str, key: str) -> str:
    """What travels between processes for ``(tenant, key)``: 128 bits of SHA-256.

    Not the key itself: a client's Idempotency-Key is the client's text, and
    whoever can LISTEN on the database should not read tenants' keys from it.
    Fixed length, far below PostgreSQL's 8000-byte payload limit.
    """
    return hashlib.sha256(json.dumps([tenant, key]).encode()).hexdigest()[:32]


class Waiter:
    """One waiting caller's wake-up flag."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def clear(self) -> None:
        """Forget earlier wake-ups: call before each look at the store."""
        self._event.clear()

    def wake(self) -> None:
        self._event.set()

    async def wait(self, seconds: float) -> bool:
        """True when woken within ``seconds``; False when the time ran out."""
        if self._event.is_set():
            return True
        try:
            await asyncio.wait_for(self._event.wait(), max(seconds, 0))
        except TimeoutError:
            return False
        return True


class Completions:
    def __init__(
        self, signals: Signals | None = None, poll_seconds: float = 1.0, look: Look | None = None
    ) -> None:
        self.signals = signals
        self.poll_seconds = poll_seconds
        self._look = look
        self._waiting: dict[str, set[Waiter]] = {}
        self._names: dict[str, Name] = {}
        self._poller: asyncio.Task[None] | None = None

    def __len__(self) -> int:
        """How many keys are waited on right now (observable for tests)."""
        return len(self._waiting)

    @contextlib.contextmanager
    def listen(self, tenant: str, key: str) -> Iterator[Waiter]:
        """A waiter woken by every completion of ``key`` until the block ends."""
        name = topic(tenant, key)
        waiter = Waiter()
        self._waiting.setdefault(name, set()).add(waiter)
        self._names[name] = (tenant, key)
        try:
            yield waiter
        finally:
            waiters = self._waiting.get(name)
            if waiters is not None:
                waiters.discard(waiter)
                if not waiters:
                    del self._waiting[name]  # nobody waits: keep no state behind
                    del self._names[name]

    def notify(self, tenant: str, key: str) -> None:
        """``key`` completed and committed here: wake its waiters, here and elsewhere."""
        name = topic(tenant, key)
        self._wake(name)
        if self.signals is not None:
            self.signals.send(name)

    def _wake(self, name: str | None) -> None:
        """Wake the waiters of ``name``; of every key for ``None`` (signals were missed)."""
        groups = self._waiting.values() if name is None else [self._waiting.get(name, set())]
        for waiters in groups:
            for waiter in waiters:
                waiter.wake()

    async def look_once(self) -> None:
        """The fallback: wake the waiters of every awaited key that has settled."""
        if self._look is None:
            return
        names = list(self._names.values())
        for start in range(0, len(names), _LOOK_BATCH):
            for tenant, key in await self._look(names[start : start + _LOOK_BATCH]):
                self._wake(topic(tenant, key))

    async def _look_forever(self) -> None:
        while True:
            await asyncio.sleep(self.poll_seconds)
            try:
                await self.look_once()
            except Unavailable as busy:
                log.warning("waiters' fallback look deferred: %s", busy)
            except Exception:
                log.exception("waiters' fallback look failed; trying again next interval")

    async def start(self) -> None:
        if self.signals is not None:
            await self.signals.start(self._wake)
        if self._look is not None:
            self._poller = asyncio.create_task(self._look_forever(), name="slotward-waiters")

    async def close(self) -> None:
        if self._poller is not None:
            self._poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._poller
            self._poller = None
        if self.signals is not None:
            await self.signals.close()
