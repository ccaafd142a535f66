"""The front: each connection's first protocol, serving the hot calls without aiohttp.

aiohttp spends some 100 us of Python on a request before and after its handler
(its request and response objects, its router, middleware chain and writer):
more than a replay's own work. The front reads each request itself; one in the
plain subset api/http/front_parse.py describes (a hold's create, commit and
release: the calls an agent makes most and retries most) is answered here, by
the same code the app's handlers run (api/http/hold_handlers.py's ``answer_*``;
the same authentication, problems, metrics and access line). At the first
request that is not in the subset, or not whole yet, the connection is handed to
aiohttp (api/http/edges.py's handler) with every byte not yet answered, and
stays there: what the front does not serve is served exactly as before.

The edge's rules hold here too: the connection cap (the front counts as one of
the server's connections), a head within ``head_timeout_seconds`` of the
connection opening (a hand-over passes on what is left of it), idle keep-alive
for ``keepalive_seconds``, the ``Server`` header, and a graceful stop that lets
a request being answered finish. Requests on one connection are answered one
at a time, in order; reading pauses while a large backlog waits.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Protocol, cast

from aiohttp.helpers import rfc822_formatted_time
from aiohttp.tcp_helpers import tcp_nodelay

from slotward.api import service
from slotward.api.bootstrap import Services
from slotward.api.config import Config
from slotward.api.http.auth import admit, key_caller
from slotward.api.http.front_parse import ROUTES, Parsed, answer_bytes, parse
from slotward.api.http.hold_handlers import answer_commit, answer_create, answer_release
from slotward.api.http.jsonbody import MAX_BODY_BYTES
from slotward.api.http.problems import problem_of
from slotward.api.http.responses import reply_headers, reply_status
from slotward.api.http.telemetry import observe_refusal, observe_reply
from slotward.engine.model import Principal

__all__ = ["Edge", "Front"]

log = logging.getLogger("slotward.edge")

_BACKLOG = 4 * MAX_BODY_BYTES  # bytes waiting behind the request being answered


class Adopter(Protocol):
    """aiohttp's protocol for a connection the front hands over."""

    def adopt(self, transport: asyncio.Transport, head_seconds: float) -> None: ...

    def data_received(self, data: bytes) -> None: ...


class Edge(Protocol):
    """What a front needs of the server that made it (api/http/edges.py)."""

    config: Config
    services: Services | None  # None: every request goes to aiohttp
    server_name: str

    @property
    def connections(self) -> list[Any]: ...

    def connection_made(self, handler: Any, transport: asyncio.Transport) -> None: ...

    def connection_lost(self, handler: Any, exc: BaseException | None = None) -> None: ...

    def refuse(self, transport: asyncio.BaseTransport) -> None: ...

    def handler(self) -> Adopter: ...


class Front(asyncio.Protocol):
    """One connection, until its first request the front does not serve."""

    _task_handler = None  # aiohttp's server asks its connections for this

    def __init__(self, edge: Edge, loop: asyncio.AbstractEventLoop) -> None:
        self._edge = edge
        self._loop = loop
        self._svc = edge.services
        config = edge.config
        self._head_seconds = config.head_timeout_seconds
        self._keepalive = config.keepalive_seconds
        self._transport: asyncio.Transport | None = None
        self._buf = bytearray()
        self._task: asyncio.Task[None] | None = None  # the request being answered
        self._timer: asyncio.TimerHandle | None = None
        self._head_deadline = 0.0  # the first head's, from the connection's opening
        self._answered = False  # a request was answered here
        self._idle_since = 0.0  # the last answer's end
        self._closing = False  # answer what is being answered, then close
        self._paused_reading = False
        self._paused_writing = False

    # -- the connection ------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if len(self._edge.connections) >= self._edge.config.max_connections:
            self._edge.refuse(transport)
            return
        self._transport = cast(asyncio.Transport, transport)
        tcp_nodelay(self._transport, True)  # as aiohttp's handler does: an answer goes at once
        self._edge.connection_made(self, self._transport)
        self._head_deadline = self._loop.time() + self._head_seconds
        self._timer = self._loop.call_at(self._head_deadline, self._expired)

    def data_received(self, data: bytes) -> None:
        if self._transport is None:
            return  # refused
        self._buf += data
        if self._task is None and not self._paused_writing:
            self._next()
        elif len(self._buf) > _BACKLOG and not self._paused_reading:
            self._paused_reading = True
            self._transport.pause_reading()

    def eof_received(self) -> bool | None:
        self._closing = True
        if self._task is None and self._transport is not None:
            self._transport.close()
        return True  # the answer being written may still go out

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._transport is None:
            return
        self._cancel_timer()
        self._closing = True
        if self._task is None:
            self._edge.connection_lost(self, exc)
        # else the answer's task ends it (its write is dropped by the closed transport)

    def pause_writing(self) -> None:
        self._paused_writing = True

    def resume_writing(self) -> None:
        self._paused_writing = False
        if self._task is None and self._transport is not None and not self._closing:
            self._next()

    # -- aiohttp's server stopping ---------------------------------------------

    def close(self) -> None:
        """Close once the request being answered (if any) is answered."""
        self._closing = True
        if self._task is None and self._transport is not None:
            self._transport.close()

    async def shutdown(self, timeout: float | None) -> None:  # noqa: ASYNC109 (aiohttp's call)
        """Wait up to ``timeout`` for the request being answered, then close."""
        self._closing = True
        task = self._task
        if task is not None:
            await asyncio.wait({task}, timeout=timeout)
            if not task.done():  # as aiohttp's handler does past the timeout
                task.cancel()
                await asyncio.wait({task})
        if self._transport is not None:
            self._transport.close()

    # -- requests --------------------------------------------------------------

    def _next(self) -> None:
        """Between requests: answer the next whole one, wait, or hand over."""
        if self._closing:
            return
        if not self._buf:
            self._idle_since = self._loop.time()
            if self._timer is None:
                self._timer = self._loop.call_at(self._idle_since + self._keepalive, self._expired)
            return
        svc = self._svc
        if svc is None:  # not an app of build_app's: aiohttp serves everything
            self._hand_over()
            return
        found = parse(self._buf, 0, MAX_BODY_BYTES)
        if not isinstance(found, Parsed):  # not ours, or not whole yet
            svc.metrics.handed_over(found)
            self._hand_over()
            return
        del self._buf[: found.end]
        self._answered = True
        self._task = self._loop.create_task(self._answer(svc, found))

    async def _answer(self, svc: Services, request: Parsed) -> None:
        try:
            status, headers, body = await _serve(svc, request)
            close = request.close or self._closing
            out = answer_bytes(status, headers, body, date=rfc822_formatted_time(),
                               server=self._edge.server_name, close=close)  # fmt: skip
            transport = self._transport
            if transport is not None and not transport.is_closing():
                transport.write(out)
        except Exception as exc:  # a fault of ours past the problems: no answer can be trusted
            log.error("unhandled error answering %s %s", request.method, request.route,
                      exc_info=exc)  # fmt: skip
            self._closing = True
        finally:
            self._task = None
            self._done(request.close)

    def _done(self, close: bool) -> None:
        transport = self._transport
        if transport is None:
            return
        if close or self._closing:
            self._closing = True
            if transport.is_closing():  # lost meanwhile: connection_lost left this to us
                self._edge.connection_lost(self)
            else:
                transport.close()
            return
        if self._paused_reading and len(self._buf) <= _BACKLOG:
            self._paused_reading = False
            transport.resume_reading()
        if not self._paused_writing:
            self._next()

    def _hand_over(self) -> None:
        """aiohttp's handler takes the connection and every byte not yet answered."""
        transport = self._transport
        assert transport is not None
        self._cancel_timer()
        # A first head keeps its deadline from the connection's opening; a later
        # one has its whole time from now, its first byte.
        left = self._head_seconds
        if not self._answered:
            left = max(0.0, self._head_deadline - self._loop.time())
        handler = self._edge.handler()
        self._edge.connection_lost(self)
        self._transport = None  # nothing of this connection is ours any more
        transport.set_protocol(cast(asyncio.BaseProtocol, handler))
        handler.adopt(transport, left)
        if self._paused_reading:
            transport.resume_reading()
        data, self._buf = bytes(self._buf), bytearray()
        handler.data_received(data)

    # -- timers ----------------------------------------------------------------

    def _expired(self) -> None:
        """The first head's deadline or the keep-alive's passed. Timers are lazy: one
        armed for an earlier moment is armed again for the one due now."""
        self._timer = None
        transport = self._transport
        if transport is None or self._task is not None or self._closing:
            return  # busy: the next idle moment arms it again
        now = self._loop.time()
        due = self._idle_since + self._keepalive if self._answered else self._head_deadline
        if now < due:
            self._timer = self._loop.call_at(due, self._expired)
            return
        if not self._answered:
            log.info(
                "closed a connection: its request head took longer than %g s",
                self._head_seconds,
                extra={"head_timeout_seconds": self._head_seconds},
            )
        self._closing = True
        transport.close()

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


async def _serve(svc: Services, request: Parsed) -> tuple[int, list[tuple[str, str]], bytes]:
    """The answer to ``request`` (status, headers, body), counted and logged as the
    app's would be."""
    started = time.perf_counter()
    principal: Principal | None = None
    metrics = svc.metrics
    method, route = request.method, request.route
    try:
        authorization = request.header(b"authorization") or ""  # the subset has it
        principal = await key_caller(authorization, svc.keys)
        admit(principal, svc.keys, service.WRITERS)  # the access line names a refused caller
        key = request.header(b"idempotency-key")
        if request.hold_id is None:
            reply = await answer_create(svc, principal, request.body, key)
        elif route == ROUTES[1]:
            reply = await answer_commit(svc, principal, request.hold_id, request.body, key)
        else:
            reply = await answer_release(svc, principal, request.hold_id, request.body, key)
    except Exception as exc:
        problem = problem_of(exc, method, route)
        observe_refusal(metrics, method, route, principal, started, exc)
        headers = [(k, v) for k, v in problem.headers.items() if k.lower() != "content-length"]
        body = problem.body
        return problem.status, headers, body if isinstance(body, bytes) else b""
    status = reply_status(reply)
    observe_reply(metrics, method, route, principal, started, status, reply)
    return status, reply_headers(reply), reply.body
