"""The provider workers of a server process: the calendar writer and the sync worker.

The **writer** carries out the calendar writes the relay fanned out
(engine/usecases/calendar_writes.py): it claims due writes under a lease,
puts or deletes slotward's own event in each bound calendar with nothing of
the store held, and records the outcomes in one transaction per batch. Writes
are idempotent by the event's UID, so a writer killed mid-write only makes
the next one write again. Several writers run side by side: on PostgreSQL
each claims its own (``FOR UPDATE SKIP LOCKED``), on SQLite the claims are
serialized by the database's one writer and kept apart by their lease.

The **sync worker** reads each binding's calendar when it is due (every
``SLOTWARD_PROVIDER_SYNC_INTERVAL`` seconds, sooner when a read failed) and
stores what it found as the mirror (api/providers.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import secrets
import socket
from collections.abc import Awaitable, Callable
from datetime import timedelta
from functools import partial

from slotward.api.bootstrap import Services
from slotward.engine.calendars import CalendarBinding, CalendarWrite
from slotward.engine.errors import Unavailable
from slotward.engine.rules.calendar_events import calendar_event
from slotward.engine.rules.delivery import Outcome, RelaySettings
from slotward.engine.usecases.calendar_writes import WriteResult, claim_writes, record_writes
from slotward.engine.usecases.provider_sync import claim_syncs

__all__ = ["CalendarWriter", "ProviderSync", "writable_providers"]

log = logging.getLogger("slotward.providers")

# Writes (or bindings) claimed per turn, all sent at once: each starts as it is
# claimed, so its lease (three requests' timeouts plus 10 s) outlives it. A
# claim waiting behind others could outlive its lease, and another process
# could write a newer state before this one wrote the older.
BATCH = 16


def writable_providers(svc: Services) -> list[str]:
    """The providers whose events slotward writes (the relay fans writes out to them)."""
    hub = svc.providers
    found = [hub.provider(name) for name in hub.names()]
    return sorted(p.name for p in found if p is not None and p.capabilities.writes)


def _owner() -> str:
    return f"{socket.gethostname()[:24]}:{os.getpid()}:{secrets.token_hex(4)}"


async def _forever(name: str, turn: Callable[[], Awaitable[bool]], idle: float) -> None:
    """``turn`` again and again; ``idle`` seconds between turns that found nothing.
    A store that cannot be reached, or a bug, costs a turn, never the worker."""
    while True:
        try:
            busy = await turn()
        except Unavailable as away:
            log.warning("%s deferred: %s", name, away)
            busy = False
        except Exception:
            log.exception("%s turn failed; trying again shortly", name)
            busy = False
        if not busy:
            await asyncio.sleep(idle)


class CalendarWriter:
    """One process's calendar writer."""

    def __init__(self, svc: Services, settings: RelaySettings) -> None:
        self._svc = svc
        self._settings = settings
        self.owner = _owner()
        self._rand = random.Random()
        timeout = svc.providers.config.settings.timeout
        # A put may reconcile (a GET and a second PUT): the claim outlives three requests.
        self._lease = timedelta(seconds=3 * timeout + 10)

    async def run_forever(self) -> None:
        await _forever("calendar writer", self.turn, self._settings.interval)

    async def turn(self) -> bool:
        """Claim a batch, write it, record it. True when there may be more at once."""
        svc = self._svc
        claimed = await svc.store.write(
            partial(claim_writes, clock=svc.clock, owner=self.owner, lease=self._lease,
                    limit=BATCH)
        )  # fmt: skip
        if not claimed:
            return False
        sent = await asyncio.gather(*(self._write(w, b) for w, b in claimed))
        results = [r for r in sent if r is not None]
        done = await svc.store.write(
            partial(record_writes, clock=svc.clock, owner=self.owner, results=results,
                    settings=self._settings, rand=self._rand.random)
        )  # fmt: skip
        svc.metrics.calendar_writes(done.written, done.failed, done.dead)
        return len(claimed) == BATCH or done.superseded > 0

    async def _write(self, write: CalendarWrite, binding: CalendarBinding) -> WriteResult | None:
        svc = self._svc
        at = svc.clock.now()
        if write.claim_until is not None and write.claim_until <= at:
            return None  # the claim ran out (a stalled turn): another writer may have it
        outcome = await self._send(write, binding)
        if not outcome.ok:
            log.info(
                "calendar write failed",
                extra={"hold": write.hold_id, "attendee": write.attendee,
                       "error": (outcome.error or "")[:200], "status": outcome.status},
            )  # fmt: skip
        return WriteResult(write.key, write.version, at, outcome)

    async def _send(self, write: CalendarWrite, binding: CalendarBinding) -> Outcome:
        hub = self._svc.providers
        provider = hub.provider(binding.provider)
        if provider is None:
            return Outcome(None, f"no provider {binding.provider!r} in this server")
        try:
            conn = hub.connection(binding)
        except ValueError:
            return Outcome(None, "the password cannot be opened: was SLOTWARD_SECRET_KEY changed?")
        timeout = 3 * hub.config.settings.timeout
        try:
            if write.action == "delete":
                return await asyncio.wait_for(provider.delete_event(conn, write.uid), timeout)
            return await asyncio.wait_for(provider.put_event(conn, calendar_event(write)), timeout)
        except TimeoutError:
            return Outcome(None, "the calendar did not answer in time")
        except Exception as exc:  # an adapter's bug must not stop the writer
            log.exception("provider %s failed a write", binding.provider)
            return Outcome(None, f"the adapter failed: {type(exc).__name__}")


class ProviderSync:
    """One process's sync worker: reads the calendars that are due."""

    def __init__(self, svc: Services, interval: float) -> None:
        self._svc = svc
        self._interval = interval  # how often an idle worker looks for due bindings
        self.owner = _owner()
        timeout = svc.providers.config.settings.timeout
        self._lease = timedelta(seconds=3 * timeout + 10)

    async def run_forever(self) -> None:
        await _forever("provider sync", self.turn, self._interval)

    async def turn(self) -> bool:
        svc = self._svc
        due = await svc.store.write(
            partial(claim_syncs, clock=svc.clock, owner=self.owner, lease=self._lease,
                    limit=BATCH)
        )  # fmt: skip
        if not due:
            return False
        await asyncio.gather(*(self._read(b) for b in due))
        return len(due) == BATCH

    async def _read(self, binding: CalendarBinding) -> None:
        with contextlib.suppress(Unavailable):  # the store: the claim runs out, read again
            await self._svc.providers.read(self._svc, binding)
