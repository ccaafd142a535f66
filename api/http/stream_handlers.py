"""GET /v1/audit/stream: the tenant's audit entries as server-sent events.

Each entry is one event, ``id: <seq>``, ``event: audit`` and ``data:`` the
entry as ``GET /v1/audit`` shows it (compact JSON: one line). The stream
starts after ``Last-Event-ID`` (what a browser's ``EventSource`` sends when it
reconnects) or else ``?after=<seq>``; with neither, after the chain's current
head (only what happens from now on; ``after=0`` is from the start). The head
is read before the answer's head is sent, so an entry appended once a client
has its headers is always in its stream.

At server shutdown every open stream ends at once (:func:`close_streams`,
run by ``on_shutdown`` before the server waits for its requests), so a
stopping server is never held by its dashboards.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any

from aiohttp import web

from slotward.api import service
from slotward.api.http.auth import authenticate
from slotward.api.http.context import SERVICES, client_gone
from slotward.api.http.params import query_int
from slotward.engine.errors import SlotwardError, ValidationFailed
from slotward.engine.rules.documents import encode

__all__ = ["CLOSING", "EVENT_STREAM", "audit_stream", "close_streams"]

log = logging.getLogger("slotward.api")

EVENT_STREAM = "text/event-stream"
# Set when the app shuts down: every open stream ends.
CLOSING = web.AppKey("slotward.streams_closing", asyncio.Event)
_MAX_DIGITS = 15  # as query_int: an exact I-JSON integer
_RETRY_MS = 2000  # how long a browser waits before it reconnects


async def close_streams(app: web.Application) -> None:
    """End every open stream (``app.on_shutdown``)."""
    app[CLOSING].set()


async def audit_stream(request: web.Request) -> web.StreamResponse:
    svc = request.app[SERVICES]
    principal = await authenticate(request, svc.keys)
    after = _last_event_id(request)
    if after is None:
        after = query_int(request, "after", 0, 2**53 - 1)
    if after is None:
        after = await service.audit_head(svc, principal)

    async def still_allowed() -> bool:
        try:
            await authenticate(request, svc.keys, count=False)
        except SlotwardError:
            return False
        return True

    response = web.StreamResponse(
        headers={
            "Content-Type": f"{EVENT_STREAM}; charset=utf-8",
            "Cache-Control": "no-store",
            "X-Accel-Buffering": "no",  # a proxy must pass each event on at once
        }
    )
    await response.prepare(request)
    feed = service.audit_feed(
        svc, principal, after, closing=request.app[CLOSING],
        gone=lambda: client_gone(request), still_allowed=still_allowed,
    )  # fmt: skip
    try:
        await response.write(f"retry: {_RETRY_MS}\n\n".encode())  # sends the head now
        async with contextlib.aclosing(feed):
            async for entry in feed:
                await response.write(_frame(entry))
    except ConnectionError:
        pass  # the client went away: nothing more to send it
    except SlotwardError as error:  # the store failed mid-stream: no problem can be sent now
        log.warning("audit stream ended early: %s", error.code)
    return response  # aiohttp ends the body; a browser reconnects with Last-Event-ID


def _frame(entry: dict[str, Any] | None) -> bytes:
    if entry is None:
        return b": keep-alive\n\n"
    return b"id: %d\nevent: audit\ndata: %s\n\n" % (entry["seq"], encode(entry))


def _last_event_id(request: web.Request) -> int | None:
    """The seq in ``Last-Event-ID``; None when absent or empty (a browser's first try)."""
    raw = request.headers.get("Last-Event-ID", "").strip()
    if not raw:
        return None
    if not (raw.isascii() and raw.isdigit() and len(raw) <= _MAX_DIGITS):
        raise ValidationFailed(
            "Last-Event-ID must be the seq of an audit entry (an integer)",
            code="invalid_field",
            extra={"field": "Last-Event-ID"},
        )
    return int(raw)
