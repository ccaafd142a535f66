"""The outbox relay: a task in every server process that delivers the outbox at least once.

Each turn is one transaction (engine/usecases/relay.py:relay_step): it
records the outcomes of the sends that finished, fans new events out to their
subscriptions and claims due deliveries; then it sends them concurrently with
nothing of the store held open. A slow receiver holds one of ``MAX_IN_FLIGHT`` places,
not the whole relay: new work is claimed as places free up.

Several relays run side by side. On PostgreSQL each claims its own batch
(``FOR UPDATE SKIP LOCKED``) under a lease longer than a send can take; a relay
killed mid-batch leaves its claims to run out and the next one sends them
again. On SQLite one process holds the ``relay`` lease at a time and renews it
as it goes; if it dies, another takes over when the lease runs out.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import random
import secrets
import socket
from collections.abc import Collection
from datetime import datetime

from slotward.adapters.webhooks.sender import WebhookSender
from slotward.api.bootstrap import Services
from slotward.engine.errors import Unavailable
from slotward.engine.model import Claim
from slotward.engine.rules.delivery import Outcome, RelaySettings
from slotward.engine.rules.documents import encode
from slotward.engine.rules.signing import signature_header
from slotward.engine.rules.timenorm import format_instant
from slotward.engine.usecases.relay import (
    Result,
    Work,
    drop_relay_lease,
    relay_step,
    take_relay_lease,
)

__all__ = ["MAX_IN_FLIGHT", "Relay", "webhook_body"]

log = logging.getLogger("slotward.relay")

# Deliveries being sent at once by one relay. Each send starts as it is claimed
# (the sender's pool has as many connections), so a claim's lease (the timeout
# plus 10 s) always outlives its send. Claimed 64 at a time, a relay fell
# behind 64 agents' creates on SQLite (its turn waits in the writer's queue
# with theirs); 256 kept up (docs/performance.md).
MAX_IN_FLIGHT = 256
_SECRETS_KEPT = 4096  # opened signing secrets remembered


def webhook_body(claim: Claim) -> bytes:
    """The Standard Webhooks body: ``{"type", "timestamp", "data"}``, the same on every attempt.

    A hold's event carries the hold document (its token included) and the
    event's place in the hold's sequence; any other event its own payload.
    """
    event = claim.event
    payload = dict(event.payload)
    hold = payload.pop("hold", None)
    data = {**hold, "sequence": event.seq, **payload} if isinstance(hold, dict) else payload
    return encode({"type": event.type, "timestamp": format_instant(event.created_at), "data": data})


class Relay:
    """One process's relay. ``exclusive``: take the store-wide relay lease first (SQLite)."""

    def __init__(
        self,
        svc: Services,
        sender: WebhookSender,
        settings: RelaySettings,
        *,
        exclusive: bool,
        owner: str | None = None,
        writable: Collection[str] = (),
    ) -> None:
        self._svc = svc
        self._writable = tuple(writable)  # providers whose calendars get the holds' events
        self._sender = sender
        self._settings = settings
        self._exclusive = exclusive
        self.owner = owner or f"{socket.gethostname()[:24]}:{os.getpid()}:{secrets.token_hex(4)}"
        self._flights: dict[str, asyncio.Task[Result]] = {}  # by delivery id
        self._done: list[Result] = []
        self._wake = asyncio.Event()
        self._lease_until: datetime | None = None
        self._rand = random.Random()
        svc.metrics.watch_relay(lambda: self.lease_held)  # read at scrape time: it expires
        self._opened: dict[tuple[str, str], str] = {}

    @property
    def lease_held(self) -> bool:
        """Whether this relay may deliver now (always, where no lease is needed)."""
        if not self._exclusive:
            return True
        until = self._lease_until
        return until is not None and until > self._svc.clock.now()

    @property
    def busy(self) -> bool:
        """Sends in flight, or outcomes not yet recorded."""
        return bool(self._flights or self._done)

    async def settle(self) -> None:
        """Wait for the sends in flight (each bounded by the timeout)."""
        if self._flights:
            await asyncio.wait(list(self._flights.values()))

    async def run_forever(self) -> None:
        try:
            while True:
                try:
                    busy = await self.turn()
                except Unavailable as away:
                    log.warning("relay deferred: %s; trying again shortly", away)
                    busy = False
                except Exception:
                    log.exception("relay turn failed; trying again shortly")
                    busy = False
                if not busy:
                    await self._pause()
        finally:
            await self._stop()

    async def turn(self) -> bool:
        """Record what finished, claim what fits: one transaction. True when there may
        be more to do at once."""
        held = await self._lease()  # before the results are taken: it may raise
        results, self._done = self._done, []
        room = MAX_IN_FLIGHT - len(self._flights)
        limit = max(0, min(room, self._settings.batch)) if held else 0
        if not results and limit == 0:
            return False  # nothing to record, no room: wait for a send to land
        work = await self._step(results, limit)
        for claim in work.claims:
            self._launch(claim)
        return bool(self._done) or work.more or (limit > 0 and len(work.claims) == limit)

    async def _step(self, results: list[Result], limit: int) -> Work:
        svc = self._svc
        try:
            done, work = await svc.store.write(
                lambda uow: relay_step(
                    uow, svc.clock, svc.ids, self.owner, results, limit, self._settings,
                    self._rand.random, audit_key=svc.policy.audit_key,
                    writable=self._writable,
                )
            )  # fmt: skip
        except Exception:
            if results:  # their claims run out and they go again: sent twice, never lost
                log.warning("could not record %d delivery outcomes; they will be sent again",
                            len(results))  # fmt: skip
            raise
        svc.metrics.delivered(done.delivered, done.failed, done.dead, len(done.disabled))
        for sub_id in done.disabled:
            log.warning("webhook %s disabled", sub_id)
        return work

    async def _pause(self) -> None:
        """Until a send finishes or the interval passes."""
        self._wake.clear()
        if self._done:
            return
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._wake.wait(), self._settings.interval)

    async def _lease(self) -> bool:
        if not self._exclusive:
            return True
        svc = self._svc
        now = svc.clock.now()
        ttl = self._settings.lease
        # Renewed once a third of it has passed: not a write on every turn.
        if self._lease_until is not None and self._lease_until - now > ttl * (2 / 3):
            return True
        taken = await svc.store.write(lambda uow: take_relay_lease(uow, svc.clock, self.owner, ttl))
        held_before = self.lease_held
        self._lease_until = now + ttl if taken else None
        if taken and not held_before:
            log.info("relay lease taken by %s", self.owner)
        return taken

    def _launch(self, claim: Claim) -> None:
        task = asyncio.create_task(self._send(claim))
        self._flights[claim.delivery.id] = task
        task.add_done_callback(functools.partial(self._landed, claim.delivery.id))

    def _landed(self, key: str, task: asyncio.Task[Result]) -> None:
        self._flights.pop(key, None)
        if not task.cancelled():
            failed = task.exception()
            if failed is None:
                self._done.append(task.result())
            else:  # a bug, not the receiver: its claim runs out and it goes again
                log.error("sending delivery %s failed", key, exc_info=failed)
        self._wake.set()

    async def _send(self, claim: Claim) -> Result:
        svc = self._svc
        now = svc.clock.now()
        delivery = claim.delivery
        try:
            keys = self._secrets(claim, now)
        except ValueError:  # sealed under a key the server no longer has
            lost = "the signing secret cannot be opened: was SLOTWARD_SECRET_KEY changed?"
            return Result(delivery.id, delivery.tenant, now, Outcome(None, lost))
        body = webhook_body(claim)
        stamp = int(now.timestamp())
        headers = {
            "webhook-id": claim.event.id,
            "webhook-timestamp": str(stamp),
            "webhook-signature": signature_header(keys, claim.event.id, stamp, body),
        }
        outcome = await self._sender.send(claim.subscription.url, headers, body)
        return Result(delivery.id, delivery.tenant, now, outcome)

    def _secrets(self, claim: Claim, now: datetime) -> list[str]:
        sub = claim.subscription
        return [
            self._open(s.sealed, sub.id) for s in sub.secrets if s.until is None or s.until > now
        ]

    def _open(self, sealed: str, context: str) -> str:
        # Opening costs about 50 us: each secret once (it lives in this process
        # anyway, to sign), as long as its sealed form is the same.
        key = (sealed, context)
        plain = self._opened.get(key)
        if plain is None:
            plain = self._svc.box.open(sealed, context)
            if len(self._opened) >= _SECRETS_KEPT:
                self._opened.clear()
            self._opened[key] = plain
        return plain

    async def _stop(self) -> None:
        """Let in-flight sends finish (briefly), record them, give the lease back."""
        if self._flights:
            tasks = list(self._flights.values())
            await asyncio.wait(tasks, timeout=2.0)
            for task in tasks:
                task.cancel()
        results, self._done = self._done, []
        if results:
            with contextlib.suppress(Exception):
                await self._step(results, 0)
        if self._exclusive and self._lease_until is not None:
            svc = self._svc
            with contextlib.suppress(Exception):
                await svc.store.write(lambda uow: drop_relay_lease(uow, self.owner))
        self._lease_until = None
