"""The crash test's client side: calls sent, retried while their answers are lost,
and each attempt recorded as a ``slotward.testing.recorded.Call``."""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import aiohttp

from slotward.testing.recorded import Call, Op

LOST_RETRIES = 4  # retries of a call whose answer was lost, each landing once at most
BACK_SECONDS = 30.0  # how long a client waits for a killed server to come back


@dataclass(frozen=True)
class Agent:
    tenant: str
    name: str
    secret: str


class Sent:
    """A planned call's trace context for aiohttp: ``callback`` runs once, as its body
    is written; ``lose`` is asked as an answer arrives whether to drop it (the server
    dies then). ``index``: the call's place in the plan."""

    def __init__(
        self, index: int, callback: Callable[[], None], lose: Callable[[], bool] = lambda: False
    ) -> None:
        self.index = index
        self._callback: Callable[[], None] | None = callback
        self.lose = lose

    def fire(self) -> None:
        callback, self._callback = self._callback, None
        if callback is not None:
            callback()


async def _on_body(
    session: aiohttp.ClientSession,
    context: SimpleNamespace,
    params: aiohttp.TraceRequestChunkSentParams,
) -> None:
    sent = context.trace_request_ctx
    if isinstance(sent, Sent):
        sent.fire()


def tracing() -> aiohttp.TraceConfig:
    """What a session needs for ``Sent`` to fire."""
    trace = aiohttp.TraceConfig()
    trace.on_request_chunk_sent.append(_on_body)
    return trace


@dataclass
class Recorder:
    """Sends calls and records each attempt as a ``Call``, labelled with its intent;
    ``planned`` holds the plan index of each (None: not a planned call)."""

    base: str
    session: aiohttp.ClientSession
    calls: list[Call] = field(default_factory=list)
    planned: list[int | None] = field(default_factory=list)
    # Answers dropped at a kill (status, body, headers), by plan index: the
    # server gave them, the history records the call as unanswered.
    lost: dict[int, tuple[int, bytes, dict[str, str]]] = field(default_factory=dict)

    async def attempt(
        self, agent: Agent, op: Op, path: str, body: dict[str, Any], target: str | None,
        intent: str, sent: Sent | None = None,
    ) -> Call | None:  # fmt: skip
        """One attempt; None when no connection was made (nothing reached the server)."""
        headers = {"Authorization": f"Bearer {agent.secret}"}
        invoked = time.time()
        try:
            async with self.session.post(
                self.base + path, data=json.dumps(body), headers=headers, trace_request_ctx=sent
            ) as resp:
                raw = await resp.read()
                code, answered = resp.status, dict(resp.headers)
            status: int | None = code
            if sent is not None and sent.lose():  # the server dies now; the answer is lost
                self.lost[sent.index] = (code, raw, answered)
                status, raw, answered = None, b"", {}
        except aiohttp.ClientConnectorError:
            return None
        except (aiohttp.ClientError, TimeoutError):
            status, raw, answered = None, b"", {}  # indeterminate: it may have acted
        call = Call(op, agent.tenant, agent.name, body, status, raw, answered, target,
                    None, invoked, time.time(), intent)  # fmt: skip
        self.calls.append(call)
        self.planned.append(sent.index if sent else None)
        return call

    async def send(
        self,
        agent: Agent,
        op: Op,
        path: str,
        variants: Sequence[dict[str, Any]],
        retry: random.Random,
        *,
        intent: str,
        target: str | None = None,
        sent: Sent | None = None,
        back: Callable[[], Awaitable[None]] | None = None,
    ) -> Call:
        """Until answered: a refused connection waits for the server to come back (by
        ``back``, or polling), a lost answer is retried (with any of the ``variants``,
        drawn from ``retry``) up to LOST_RETRIES times. ``sent`` fires as the first body
        goes out."""
        lost, back_by = 0, time.monotonic() + BACK_SECONDS
        body = variants[0]
        while True:
            call = await self.attempt(agent, op, path, body, target, intent, sent)
            if call is None:
                if time.monotonic() > back_by:
                    raise RuntimeError(f"the server did not come back for {op} {path}")
                await (back() if back else asyncio.sleep(0.03))
                continue
            if call.status is not None or lost >= LOST_RETRIES:
                return call
            lost += 1
            body = retry.choice(variants)
            await asyncio.sleep(retry.uniform(0.01, 0.08))
