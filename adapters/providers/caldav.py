"""The ``caldav`` provider: any RFC 4791 server, over aiohttp (never blocking the loop).

Busy time is read by RFC 6578 ``sync-collection`` where the server offers it:
a cursor made for the same window holds the sync token, and the next read
fetches only the members changed since (``calendar-multiget``, batched). A
full read takes a fresh token first, then the window's events by a
``calendar-query`` time-range REPORT, so a change between the two is read
again next time rather than lost. Where ``sync-collection`` is refused, every
read is the time-range query, full. Events slotward wrote itself come back
like any other: the engine drops them by UID.

Writes are idempotent by the event's UID, its resource ``<collection>/<uid>.ics``:
``PUT`` with ``If-None-Match: *``; a 412 means the event is there already,
and it is reconciled (read with its ETag; replaced with ``If-Match`` unless it
already says as much, or a newer write's sequence). ``DELETE``; a 404 means
already gone.

Every connection goes through the SSRF guard (adapters/webhooks/resolver.py),
redirects are not followed, answers are read up to a cap. No message, log
line or outcome carries the password, the Authorization header or a URL's
credentials: errors name the status or the failure, never the request.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from datetime import datetime
from typing import Final
from urllib.parse import quote, urljoin, urlsplit

from slotward.adapters.providers.caldav_http import Answer, DavClient, Failed
from slotward.adapters.providers.caldav_xml import (
    DavResponse,
    Multistatus,
    multiget_body,
    parse_multistatus,
    precondition,
    query_body,
    sync_body,
)
from slotward.adapters.providers.ical import (
    Budget,
    in_parser,
    read_busy,
    render_event,
    stored_state,
)
from slotward.adapters.webhooks.guard import Resolve
from slotward.engine.calendars import (
    Busy,
    BusyRead,
    CalendarEvent,
    Capabilities,
    Connection,
    ProviderSettings,
    ProviderUnreachable,
    Window,
)
from slotward.engine.clock import SystemClock
from slotward.engine.ports import Clock
from slotward.engine.rules.delivery import Outcome

__all__ = ["CalDavProvider", "caldav_provider"]

MAX_ANSWER: Final = 32 * 1024 * 1024  # one REPORT's multistatus
MAX_EVENT: Final = 1024 * 1024  # one event resource (a GET while reconciling)
MULTIGET_BATCH: Final = 100
RECONCILE_TRIES: Final = 3  # a 412 on If-Match: changed meanwhile, read it again
SYNC_ROUNDS: Final = 20  # a server may truncate a sync answer (507): ask on from its token
_REFUSED: Final = "credentials refused"
_PLAIN_UID: Final = re.compile(r"[A-Za-z0-9_@-][A-Za-z0-9_@.-]{0,199}", re.ASCII)
_REPORTS_REFUSED: Final = {"supported-report"}
_TOKEN_REFUSED: Final = {"valid-sync-token"}

CAPABILITIES: Final = Capabilities(
    writes=True,
    credentials=True,
    incremental=True,
    schemes=("https", "http"),
    description="CalDAV (RFC 4791): busy time by sync-collection or time-range query; "
    "holds written as events",
)


def caldav_provider(settings: ProviderSettings) -> CalDavProvider:
    """The entry point's factory (group ``slotward.providers``, name ``caldav``)."""
    return CalDavProvider(settings)


class CalDavProvider:
    """A CalDAV calendar, read and written over one guarded connection pool.

    ``use_sync=False`` never asks for ``sync-collection``: every read is the
    time-range query (for servers whose sync is broken, and for tests).
    """

    name = "caldav"
    capabilities = CAPABILITIES

    def __init__(
        self,
        settings: ProviderSettings,
        *,
        use_sync: bool = True,
        resolve: Resolve | None = None,
        clock: Clock | None = None,
    ) -> None:
        self._use_sync = use_sync
        self._clock = clock or SystemClock()
        self._http = DavClient(settings, resolve=resolve, clock=self._clock)

    # -- reads -------------------------------------------------------------------

    async def busy(self, conn: Connection, window: Window, cursor: str | None) -> BusyRead:
        try:
            return await self._busy(conn, window, cursor)
        except Failed as exc:
            raise ProviderUnreachable(str(exc)) from None

    async def _busy(self, conn: Connection, window: Window, cursor: str | None) -> BusyRead:
        collection = _collection(conn.url)
        token = _token_for(cursor, window) if self._use_sync else None
        if token is not None:
            changes = await self._sync(conn, collection, token)
            if changes is not None:
                return await self._incremental(conn, collection, window, changes)
        fresh = await self._sync(conn, collection, None) if self._use_sync else None
        busy = await self._query(conn, collection, window)
        new_token = fresh.sync_token if fresh is not None else None
        return BusyRead(full=True, busy=tuple(busy), cursor=_cursor(new_token, window))

    async def _incremental(
        self, conn: Connection, collection: str, window: Window, changes: Multistatus
    ) -> BusyRead:
        changed = sorted({r.href for r in changes.responses if r.status != 404})
        removed = sorted({r.href for r in changes.responses if r.status == 404})
        cursor = _cursor(changes.sync_token, window)
        if not changed and not removed:
            return BusyRead(full=False, unchanged=True, cursor=cursor)
        busy: list[Busy] = []
        for start in range(0, len(changed), MULTIGET_BATCH):
            batch = changed[start : start + MULTIGET_BATCH]
            answer = await self._report(conn, collection, multiget_body(batch), depth="1")
            busy += await _read_all(answer.responses, window, conn.timezone)
        return BusyRead(
            full=False,
            busy=tuple(busy),
            changed=tuple(changed),
            removed=tuple(removed),
            cursor=cursor,
        )

    async def _sync(
        self, conn: Connection, collection: str, token: str | None
    ) -> Multistatus | None:
        """The members changed since ``token`` (every member for None) and the new
        token; None when the server refuses the token or the report (a full read, or
        the time-range query, then)."""
        own = urlsplit(collection).path
        responses: list[DavResponse] = []
        for _ in range(SYNC_ROUNDS):
            answer = await self._http.request(
                conn, "REPORT", collection, sync_body(token), depth="1", cap=MAX_ANSWER
            )
            if answer.status != 207:
                self._sync_refused(answer)
                return None
            found = await in_parser(parse_multistatus, answer.body)
            truncated = any(r.href == own and r.status == 507 for r in found.responses)
            responses += [r for r in found.responses if r.href != own]
            if not truncated or found.sync_token in (None, token):
                return Multistatus(tuple(responses), found.sync_token)
            token = found.sync_token  # RFC 6578 3.6: the rest comes from the partial token
        raise Failed(f"sync-collection still truncated after {SYNC_ROUNDS} rounds")

    def _sync_refused(self, answer: Answer) -> None:
        """Returns when a sync-collection's refusal means "read it all" (the token is
        not valid, or the report is not offered); raises when it means the calendar
        cannot be read now."""
        status, condition = answer.status, precondition(answer.body)
        if status in (403, 409) and condition in _TOKEN_REFUSED | _REPORTS_REFUSED:
            return
        if status in (401, 403, 429) or (status >= 500 and status != 501) or status < 400:
            raise self._unreachable(answer)
        # 400, 404, 405, 501 ...: a server without sync-collection answers one of these.

    async def _query(self, conn: Connection, collection: str, window: Window) -> list[Busy]:
        answer = await self._report(conn, collection, query_body(window), depth="1")
        return await _read_all(answer.responses, window, conn.timezone)

    async def _report(
        self, conn: Connection, collection: str, body: bytes, depth: str
    ) -> Multistatus:
        answer = await self._http.request(
            conn, "REPORT", collection, body, depth=depth, cap=MAX_ANSWER
        )
        if answer.status != 207:
            raise self._unreachable(answer)
        return await in_parser(parse_multistatus, answer.body)

    # -- writes ------------------------------------------------------------------

    async def put_event(self, conn: Connection, event: CalendarEvent) -> Outcome:
        try:
            url = _event_url(conn.url, event.uid)
            body = render_event(event, self._clock.now())
            answer = await self._put(conn, url, body, {"If-None-Match": "*"})
            for _ in range(RECONCILE_TRIES):
                if answer.status != 412:
                    return self._outcome(answer)
                answer = await self._reconcile(conn, url, event, body)
            if answer.status == 412:
                return Outcome(412, f"changed while reconciling, {RECONCILE_TRIES} times")
            return self._outcome(answer)
        except Failed as exc:
            return Outcome(None, str(exc))

    async def _reconcile(
        self, conn: Connection, url: str, event: CalendarEvent, body: bytes
    ) -> Answer:
        """After a 412: the event as it is there decides. Already as asked (or newer):
        done; else replaced if it has not changed since it was read."""
        found = await self._http.request(conn, "GET", url, b"", cap=MAX_EVENT)
        if found.status == 404:  # deleted meanwhile: create it again
            return await self._put(conn, url, body, {"If-None-Match": "*"})
        if found.status != 200:
            return found
        etag = found.headers.get("ETag")
        status, sequence = await in_parser(stored_state, found.body, event.uid)
        if sequence is not None and (
            sequence > event.sequence or (sequence == event.sequence and status == event.status)
        ):
            return Answer(200, {}, b"")
        if etag is None:
            return await self._put(conn, url, body, {})  # no ETag to guard by: the best left
        return await self._put(conn, url, body, {"If-Match": etag})

    async def _put(
        self, conn: Connection, url: str, body: bytes, headers: dict[str, str]
    ) -> Answer:
        sent = {**headers, "Content-Type": "text/calendar; charset=utf-8"}
        return await self._http.request(conn, "PUT", url, body, headers=sent, cap=64 * 1024)

    async def delete_event(self, conn: Connection, uid: str) -> Outcome:
        try:
            answer = await self._http.request(
                conn, "DELETE", _event_url(conn.url, uid), b"", cap=64 * 1024
            )
        except Failed as exc:
            return Outcome(None, str(exc))
        if answer.status == 404:
            return Outcome(204, None)  # already gone: what the delete asked for holds
        return self._outcome(answer)

    def _outcome(self, answer: Answer) -> Outcome:
        status = answer.status
        if 200 <= status < 300:
            return Outcome(status, None)
        if status in (401, 403):
            return Outcome(status, _REFUSED)
        if 300 <= status < 400:
            return Outcome(status, f"HTTP {status}: redirect not followed")
        retry_after = None
        if status in (429, 503):
            retry_after = self._http.retry_after(answer.headers.get("Retry-After"))
        return Outcome(status, f"HTTP {status}", retry_after)

    def _unreachable(self, answer: Answer) -> ProviderUnreachable:
        """What a read's answer other than the one it wanted means."""
        status = answer.status
        if status in (401, 403):
            return ProviderUnreachable(_REFUSED)
        retry_after = None
        if status in (429, 503):
            retry_after = self._http.retry_after(answer.headers.get("Retry-After"))
        return ProviderUnreachable(f"the calendar answered HTTP {status}", retry_after=retry_after)

    # -- HTTP --------------------------------------------------------------------

    async def close(self) -> None:
        """Close the pool; a later call opens a new one."""
        await self._http.close()


def _collection(url: str) -> str:
    """The collection's URL, with the trailing slash its members are resolved against."""
    return url if url.endswith("/") else url + "/"


def _event_url(collection_url: str, uid: str) -> str:
    """The event's member URL: the UID itself when it is plain (slotward's are),
    else its hash: servers decode an escaped "/" or ".." back into a path."""
    name = uid if _PLAIN_UID.fullmatch(uid) else hashlib.sha256(uid.encode()).hexdigest()
    return urljoin(_collection(collection_url), quote(name, safe="") + ".ics")


def _cursor(token: str | None, window: Window) -> str:
    return json.dumps(
        {"token": token, "start": window.start.isoformat(), "end": window.end.isoformat()},
        separators=(",", ":"),
    )


def _token_for(cursor: str | None, window: Window) -> str | None:
    """The sync token of a cursor made for this same window, else None (a full read)."""
    if not cursor:
        return None
    try:
        state = json.loads(cursor)
        same = (
            datetime.fromisoformat(state["start"]) == window.start
            and datetime.fromisoformat(state["end"]) == window.end
        )
    except (ValueError, TypeError, KeyError):
        return None
    token = state.get("token")
    return token if same and isinstance(token, str) and token else None


async def _read_all(responses: Sequence[DavResponse], window: Window, timezone: str) -> list[Busy]:
    """Each member's busy time, its href the source. Parsing and expanding is CPU
    work: done in a thread, so the event loop keeps serving meanwhile."""
    members = [(r.href, r.data) for r in responses if r.data and not r.href.endswith("/")]
    if not members:
        return []
    return await in_parser(_parse_all, members, window, timezone)


def _parse_all(members: Sequence[tuple[str, bytes]], window: Window, timezone: str) -> list[Busy]:
    """Every member's blocks, under one budget: the caps are the read's, not each
    member's (many small dense members must not add up to unbounded work)."""
    budget = Budget()
    busy: list[Busy] = []
    for href, data in members:
        busy += read_busy(data, window, timezone, source=href, budget=budget)
    return busy
