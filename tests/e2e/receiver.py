"""A real webhook receiver for the relay's tests: aiohttp on 127.0.0.1, scripted.

It records every request (path, headers, raw body, arrival time, what it
answered) and answers from a script, one step per request: a status (with
headers, so 503 with ``Retry-After`` and 302 with a ``Location``), a hang
longer than the relay's timeout, or a gate the test opens. Once the script
runs out it answers ``default`` (200). It can be stopped and started again on
the same port: the relay then meets a refused connection, as when a receiver
goes away, and finds it again when it comes back.

Every request is checked with the ``standardwebhooks`` package against the
secrets the test gives it, so the signatures are judged by an implementation
that is not slotward's.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from slotward.api.config import Config
from slotward.api.http.edges import build_runner

__all__ = ["Arrival", "Gate", "Hang", "Receiver", "Reply", "eventually", "verifies",
           "wait_until"]  # fmt: skip

HOOK_PATH = "/hook"
TRAP_PATH = "/trap"  # where redirects point: a request here means a redirect was followed


@dataclass(frozen=True)
class Reply:
    """Answer ``status`` (with ``headers``) at once."""

    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Hang:
    """Say nothing for ``seconds`` (longer than the relay's timeout), then ``then``."""

    seconds: float
    then: Reply = Reply(200)


@dataclass
class Gate:
    """Hold the request until the test opens the gate (or the receiver stops), then 200."""

    opened: asyncio.Event = field(default_factory=asyncio.Event)

    def open(self) -> None:
        self.opened.set()


Step = Reply | Hang | Gate


@dataclass(frozen=True)
class Arrival:
    """One request as it arrived, and what the receiver answered."""

    at: float  # time.time() when its body had arrived
    path: str
    headers: dict[str, str]  # names lower-cased
    body: bytes
    answered: int | None  # None: no answer (a hang cut short by the caller or a stop)
    verified_by: tuple[str, ...]  # the secrets it verifies with (standardwebhooks)

    @property
    def webhook_id(self) -> str:
        return self.headers.get("webhook-id", "")

    @property
    def doc(self) -> dict[str, Any]:
        parsed: dict[str, Any] = json.loads(self.body)
        return parsed

    @property
    def hold_id(self) -> str:
        return str(self.doc["data"]["id"])

    @property
    def sequence(self) -> int:
        return int(self.doc["data"]["sequence"])

    @property
    def signatures(self) -> list[str]:
        return self.headers.get("webhook-signature", "").split()

    @property
    def ok(self) -> bool:
        return self.answered is not None and 200 <= self.answered < 300


class Receiver:
    """The receiver; ``async with Receiver() as r`` starts it on a free port."""

    def __init__(self, secrets: Iterable[str] = (), default: Step = Reply(200)) -> None:
        self.secrets: list[str] = list(secrets)
        self.default = default
        self.arrivals: list[Arrival] = []  # each once answered (or given up)
        self.in_flight = 0  # requests arrived and not yet answered
        self._script: deque[Step] = deque()
        self._runner: web.BaseRunner | None = None
        self._gates: list[Gate] = []
        self._hold_all: Gate | None = None
        self.port = 0

    # --- running -----------------------------------------------------------

    async def __aenter__(self) -> Receiver:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    async def start(self) -> None:
        """Listen, on the port it had before if it had one (it came back)."""
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        # Served as slotward serves (its edge); a short shutdown: a stop must not
        # wait for a hanging request to finish.
        runner = build_runner(app, Config(), shutdown_timeout=0.5)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", self.port, reuse_address=True)
        await site.start()
        self.port = int(runner.addresses[0][1])
        self._runner = runner

    async def stop(self) -> None:
        """Go away: the port refuses connections until :meth:`start`."""
        for gate in self._gates:
            gate.open()
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()

    @property
    def running(self) -> bool:
        return self._runner is not None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}{HOOK_PATH}"

    # --- scripting ---------------------------------------------------------

    def script(self, *steps: Step) -> None:
        """Answer the next requests with ``steps``, in order, then ``default``."""
        for step in steps:
            if isinstance(step, Gate):
                self._gates.append(step)
        self._script.extend(steps)

    def gate_all(self) -> Gate:
        """Hold every request from now on until the returned gate opens."""
        gate = Gate()
        self._gates.append(gate)
        self._hold_all = gate
        return gate

    def release_all(self) -> None:
        """Let every held request (and the next ones) through."""
        gate, self._hold_all = self._hold_all, None
        if gate is not None:
            gate.open()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        headers = {k.lower(): v for k, v in request.headers.items()}
        at = time.time()
        self.in_flight += 1
        step: Step = self.default
        if self._script:
            step = self._script.popleft()
        elif self._hold_all is not None:
            step = self._hold_all
        verified = self._verify(body, headers)
        answered: int | None = None
        try:
            reply = await self._perform(step)
            # A caller that gave up (its timeout, its process killed) never hears it.
            transport = request.transport
            if transport is not None and not transport.is_closing():
                answered = reply.status
            return web.Response(status=reply.status, headers=reply.headers, text="")
        finally:
            self.in_flight -= 1
            self.arrivals.append(Arrival(at, request.path, headers, body, answered, verified))

    async def _perform(self, step: Step) -> Reply:
        if isinstance(step, Reply):
            return step
        if isinstance(step, Hang):
            await asyncio.sleep(step.seconds)  # real network timing is the point here
            return step.then
        await step.opened.wait()
        return Reply(200)

    def _verify(self, body: bytes, headers: dict[str, str]) -> tuple[str, ...]:
        return tuple(s for s in self.secrets if verifies(s, body, headers))

    # --- reading -----------------------------------------------------------

    def hooks(self) -> list[Arrival]:
        """The requests to the webhook path (not the trap), in arrival order."""
        return sorted((a for a in self.arrivals if a.path == HOOK_PATH), key=lambda a: a.at)

    def trapped(self) -> list[Arrival]:
        """Requests to the redirect target: there must never be any."""
        return [a for a in self.arrivals if a.path == TRAP_PATH]

    def delivered_ids(self) -> set[str]:
        """The webhook-ids answered with a 2xx."""
        return {a.webhook_id for a in self.hooks() if a.ok}

    def of(self, webhook_id: str) -> list[Arrival]:
        return [a for a in self.hooks() if a.webhook_id == webhook_id]

    async def wait_for(self, ids: Iterable[str], within: float = 30.0) -> None:
        """Until every id in ``ids`` has been answered with a 2xx."""
        wanted = set(ids)
        await wait_until(
            lambda: wanted <= self.delivered_ids(),
            within,
            lambda: f"missing {sorted(wanted - self.delivered_ids())}",
        )

    async def wait_for_requests(self, count: int, within: float = 30.0) -> None:
        """Until at least ``count`` requests reached the webhook path."""
        await wait_until(
            lambda: len(self.hooks()) >= count,
            within,
            lambda: f"{len(self.hooks())} requests of {count}",
        )


async def wait_until(
    predicate: Callable[[], bool],
    within: float = 30.0,
    say: Callable[[], str] = lambda: "",
) -> None:
    """Poll ``predicate`` until it holds; AssertionError after ``within`` seconds."""
    deadline = time.monotonic() + within
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached within {within} s: {say()}")
        await asyncio.sleep(0.02)


async def eventually(
    check: Callable[[], Awaitable[bool]],
    within: float = 30.0,
    say: Callable[[], str] = lambda: "",
) -> None:
    """As :func:`wait_until`, for a check that must await (an HTTP read)."""
    deadline = time.monotonic() + within
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError(f"not reached within {within} s: {say()}")
        await asyncio.sleep(0.05)


def verifies(secret: str, body: bytes, headers: dict[str, str]) -> bool:
    """Whether ``standardwebhooks`` accepts the request under ``secret``."""
    try:
        Webhook(secret).verify(body, headers)
    except WebhookVerificationError:
        return False
    return True
