"""The edge of the server: everything between an accepted socket and the app.

`slotward serve` (api/cli/serving.py) and the end-to-end tests (tests/e2e/conftest.py)
both serve through :func:`build_runner`, so the tests exercise what production
runs. Each connection starts with the front (api/http/front.py), which answers
a hold's create, commit and release itself and hands the connection to :class:`_EdgeHandler` at
its first other request. aiohttp's connection protocol is replaced by that
subclass for four reasons (the front keeps them too):

- **Parser refusals.** aiohttp logs a request its HTTP parser refuses at ERROR
  with the offending bytes (an ``Authorization`` line with a stray CR, so the
  API key) and answers ``text/plain`` echoing them. Here the refusal is a 400
  problem+json ``malformed_request`` whose detail names the kind of fault from
  a fixed table, and the log line names the exception class only.
- **Slow clients.** aiohttp closes a connection that has not sent a whole head
  only at its keep-alive deadline (an hour by default). Here a head must be
  complete within ``config.head_timeout_seconds`` of the connection opening, or
  of its first byte on a kept-alive connection; idle keep-alive lasts
  ``config.keepalive_seconds``. A connection that misses either is closed
  without an answer.
- **A cap.** Beyond ``config.max_connections`` open connections a process
  answers a new one at once with a 503 problem+json (``Retry-After: 1``,
  ``Connection: close``) before reading anything, then closes it.
- **Server header.** ``Server: slotward`` on every answer, not the Python and
  aiohttp versions.
- **Before the middleware.** An ``Expect`` other than 100-continue (aiohttp
  answers it text/plain quoting the header, a 500 past ASCII), or any aiohttp
  HTTP error raised before the app's middleware, is a problem+json too.

aiohttp 3.14 has no supported way to choose the protocol class or its error
answers (``logger=`` alone would still echo the bytes in the 400's body), so
this overrides ``AppRunner._make_server`` and leans on ``RequestHandler``
internals (``_messages``, ``_request_in_progress``, ``_request_count``,
``handle_error``, ``log_exception``); tests/e2e/test_edges.py and
test_slow_clients.py fail if an upgrade changes them. Nothing global is patched.
"""

from __future__ import annotations

import asyncio
import logging
import traceback
from typing import Any, cast

from aiohttp import hdrs, web
from aiohttp.http_exceptions import HttpProcessingError

from slotward.api.bootstrap import Services
from slotward.api.config import Config
from slotward.api.http.context import SERVICES
from slotward.api.http.front import Front
from slotward.api.http.problems import (
    early_http_problem,
    internal_error,
    parser_refusal,
    too_many_connections,
    unsupported_expectation,
)
from slotward.api.logs import Throttled

__all__ = ["SERVER_NAME", "build_runner"]

SERVER_NAME = "slotward"

log = logging.getLogger("slotward.edge")


def build_runner(app: web.Application, config: Config, *, shutdown_timeout: float) -> web.AppRunner:
    """The runner serving ``app`` behind the edge that ``config`` sets."""
    app.on_response_prepare.append(_name_the_server)
    return _EdgeRunner(app, config, shutdown_timeout=shutdown_timeout)


async def _name_the_server(request: web.Request, response: web.StreamResponse) -> None:
    response.headers[hdrs.SERVER] = SERVER_NAME  # a handler that streams its answer


class _EdgeRunner(web.AppRunner):
    __slots__ = ("_config",)

    def __init__(self, app: web.Application, config: Config, *, shutdown_timeout: float) -> None:
        super().__init__(
            app, handle_signals=False, access_log=None, shutdown_timeout=shutdown_timeout
        )
        self._config = config

    async def _make_server(self) -> web.Server:
        plain = await super()._make_server()  # the app started, its handler and request factory
        return _EdgeServer(plain, self._config, self.app.get(SERVICES))


class _EdgeServer(web.Server):
    """aiohttp's server, making a :class:`~slotward.api.http.front.Front` of each
    connection, which hands it to an :class:`_EdgeHandler` when it must."""

    def __init__(self, plain: web.Server, config: Config, services: Services | None) -> None:
        super().__init__(
            self._handle,
            request_factory=plain.request_factory,
            handler_cancellation=plain.handler_cancellation,
        )
        self._app_handler = plain.request_handler
        self.config = config
        self.services = services  # None: an app not of build_app's (a test's); all to aiohttp
        self.server_name = SERVER_NAME
        self._refused = Throttled(log)  # a flood past the cap is not a line per connection

    def refuse(self, transport: asyncio.BaseTransport) -> None:
        """Answer a connection past the cap at once, and close it."""
        self.refused()
        # uvloop's transports do not subclass asyncio's (isinstance would be False),
        # yet every stream transport a server makes writes.
        cast(asyncio.WriteTransport, transport).write(_CAP_ANSWER)
        transport.close()  # sends what was written, then closes

    def refused(self) -> None:
        limit = self.config.max_connections
        self._refused.warning(
            f"refused a connection: {limit} open, the limit",
            f"refused %d more connections in the last second ({limit} open, the limit)",
            {"max_connections": limit},
        )

    async def _handle(self, request: web.BaseRequest) -> web.StreamResponse:
        """The app's handler, and what the app does before its middleware, as problems."""
        expect = request.headers.get(hdrs.EXPECT)
        if expect is not None and expect.lower() != "100-continue":
            # aiohttp's own answer is text/plain quoting the header (a 500 past ASCII).
            return unsupported_expectation()
        try:
            return await self._app_handler(request)
        except web.HTTPException as exc:  # raised before the problem middleware runs
            if exc.status < 400:
                raise
            return early_http_problem(exc)

    def __call__(self) -> Front:  # type: ignore[override]
        return Front(self, asyncio.get_running_loop())

    def handler(self) -> _EdgeHandler:
        """aiohttp's protocol, for a connection a front hands over."""
        return _EdgeHandler(self, loop=asyncio.get_running_loop(), config=self.config)


class _EdgeHandler(web.RequestHandler):
    """One connection: head timeout, connection cap, quiet parser refusals."""

    def __init__(self, manager: _EdgeServer, *, loop: asyncio.AbstractEventLoop, config: Config):
        super().__init__(
            manager,
            loop=loop,
            keepalive_timeout=config.keepalive_seconds,
            logger=log,
            # None turns aiohttp's access log off (documented, though typed Logger):
            # the observe middleware writes the one access line per request.
            access_log=None,  # type: ignore[arg-type]
        )
        self._edge = manager
        self._edge_loop = loop
        self._head_seconds = config.head_timeout_seconds
        self._max_connections = config.max_connections
        self._head_timer: asyncio.TimerHandle | None = None
        self._refused = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if len(self._edge.connections) >= self._max_connections:
            self._refuse(transport)
            return
        super().connection_made(transport)
        self._arm_head_timer()

    def _refuse(self, transport: asyncio.BaseTransport) -> None:
        self._refused = True
        self._edge.refuse(transport)

    def adopt(self, transport: asyncio.Transport, head_seconds: float) -> None:
        """Take a connection a front has counted and opened, its head due in ``head_seconds``."""
        super().connection_made(transport)
        self._head_timer = self._edge_loop.call_later(head_seconds, self._head_expired)

    def data_received(self, data: bytes) -> None:
        if self._refused:
            return
        waiting_for_head = self._waiting_for_head()
        heads = self._request_count
        super().data_received(data)
        if self._request_count != heads:  # a whole head arrived
            self._cancel_head_timer()
        elif data and waiting_for_head and self._head_timer is None:
            self._arm_head_timer()  # the first byte of a head on a kept-alive connection

    def _waiting_for_head(self) -> bool:
        """Between requests: not handling one, none parsed and waiting."""
        return not self._messages and not self._request_in_progress

    def _arm_head_timer(self) -> None:
        self._cancel_head_timer()
        self._head_timer = self._edge_loop.call_later(self._head_seconds, self._head_expired)

    def _cancel_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_expired(self) -> None:
        self._head_timer = None
        if self._waiting_for_head() and self.transport is not None:
            log.info(
                "closed a connection: its request head took longer than %g s",
                self._head_seconds,
                extra={"head_timeout_seconds": self._head_seconds},
            )
            self.force_close()

    def connection_lost(self, exc: BaseException | None) -> None:
        self._cancel_head_timer()
        if not self._refused:
            super().connection_lost(exc)

    async def finish_response(
        self, request: web.BaseRequest, resp: web.StreamResponse, start_time: float | None
    ) -> tuple[web.StreamResponse, bool]:
        if not resp.prepared:
            resp.headers[hdrs.SERVER] = SERVER_NAME
        return await super().finish_response(request, resp, start_time)

    def handle_error(
        self,
        request: web.BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        """The answer to a request that never reached the app; ``message`` is not used."""
        if request.writer.output_size > 0:
            raise ConnectionError("an answer was already sent")  # as aiohttp does
        if status == 400:
            log.info(
                "refused a request the HTTP parser could not read",
                extra={"status": 400, "outcome": "malformed_request", "error": _name(exc)},
            )
            resp = parser_refusal(exc)
        else:
            self.log_exception("error answering a request", exc_info=exc)
            resp = internal_error()
            resp.headers[hdrs.CONNECTION] = "close"
        resp.force_close()
        return resp

    def log_exception(self, *args: Any, **kw: Any) -> None:
        """aiohttp's own error logging, without exception messages (they may quote input)."""
        exc = kw.get("exc_info")
        if isinstance(exc, (web.RequestPayloadError, HttpProcessingError)):
            log.info(
                "closed a connection whose body could not be read",
                extra={"error": _name(exc)},
            )
            return
        fields: dict[str, Any] = {"error": _name(exc)}
        if isinstance(exc, BaseException):
            fields["frames"] = "".join(traceback.format_tb(exc.__traceback__))
        log.error(str(args[0]) if args else "error", extra=fields)


def _name(exc: object) -> str | None:
    return type(exc).__name__ if isinstance(exc, BaseException) else None


_CAP_ANSWER = too_many_connections(SERVER_NAME)
