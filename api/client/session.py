"""The async client (``slotward.api.client.Slotward``): the calls and the retry loop.

    async with Slotward("http://127.0.0.1:8080", key) as sw:
        hold = await sw.create_hold(workflow_id="wf-42", step=3,
                                    attendees=["alex@example.com"],
                                    start="2030-10-14T14:00:00Z", duration_minutes=30)
        await sw.commit_hold(hold.id, hold.token)

Every call may be sent more than once: the server derives a create's key from
its intent and replays a repeated commit or release, so the client retries a
call that got no answer, or a 429, 503 or 409 ``request_in_progress``, with the
same body (api/client/retry.py says which and how long it waits). Answers are
typed (api/client/results.py); refusals raise the error tree of
api/client/errors.py. docs/client.md has the whole tour; SyncSlotward
(api/client/sync.py) is the same client for code without an event loop.
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections.abc import Awaitable, Callable, Mapping
from types import TracebackType
from typing import Any
from urllib.parse import quote, urlsplit

import aiohttp

from slotward.api.client.answers import document, refusal, worth_retrying
from slotward.api.client.errors import Unreachable
from slotward.api.client.results import Availability, Hold, ToolAnswer
from slotward.api.client.retry import RetryEvent, RetryPolicy
from slotward.engine.tools import FIND_FREE_SLOTS

__all__ = ["Slotward"]

log = logging.getLogger("slotward.client")

_Answer = tuple[int, Mapping[str, str], Any]


class Slotward:
    """An async client for one slotward server and one API key.

    ``timeout`` bounds each attempt (seconds); ``retries`` is how many times a
    call is sent again (so at most ``retries + 1`` attempts); ``deadline``, if
    given, bounds a whole call, its retries and waits included. ``session`` is
    an aiohttp session of your own (kept open at the end); without one the
    client opens and closes its own. ``on_retry`` is called before each retry
    (for logs or counts); ``sleep`` and ``rng`` are how it waits and jitters,
    there for tests to skip time.
    """

    def __init__(
        self,
        url: str,
        key: str,
        *,
        timeout: float = 10.0,
        retries: int = 5,
        session: aiohttp.ClientSession | None = None,
        deadline: float | None = None,
        policy: RetryPolicy | None = None,
        on_retry: Callable[[RetryEvent], None] | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rng: random.Random | None = None,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise ValueError("url must be an absolute http:// or https:// URL")
        # A key with a control character would be refused by aiohttp with a
        # message of its own; this one never quotes the key.
        if not key or not key.isascii() or not key.isprintable() or " " in key:
            raise ValueError("the API key must be non-empty printable ASCII without spaces")
        if timeout <= 0 or (deadline is not None and deadline <= 0):
            raise ValueError("timeout and deadline must be positive")
        self.url = url.rstrip("/")
        self._auth = f"Bearer {key}"
        self._timeout = aiohttp.ClientTimeout(total=timeout)
        self._deadline = deadline
        self._policy = policy or RetryPolicy(retries=retries)
        self._on_retry = on_retry
        self._sleep = sleep
        self._rng = rng or random.Random()
        self._session = session
        self._owns_session = session is None
        self._closed = False

    def __repr__(self) -> str:
        return f"Slotward(url={self.url!r})"

    async def __aenter__(self) -> Slotward:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the client's own session (a session passed in is left open).

        A call after it raises ``RuntimeError``: it would open a session nobody closes.
        """
        self._closed = True
        if self._owns_session and self._session is not None:
            await self._session.close()
            self._session = None

    # -- the tools --------------------------------------------------------------

    async def create_hold(
        self,
        *,
        workflow_id: str,
        step: int | None = None,
        attendees: list[str],
        start: str,
        end: str | None = None,
        duration_minutes: int | None = None,
        **fields: Any,
    ) -> Hold:
        """Place a hold (``POST /v1/holds``); a retry or reworded repeat replays the first.

        ``fields`` are the endpoint's other body fields (``title``, ``priority``,
        ``timezone``, ``duration``, ``hold_ttl_seconds``, ``description``, ...).
        Raises :class:`SlotConflict` when the slot is taken.
        """
        body: dict[str, Any] = {"workflow_id": workflow_id, "attendees": attendees, "start": start}
        given = {"step": step, "end": end, "duration_minutes": duration_minutes}
        body.update({name: value for name, value in given.items() if value is not None})
        body.update(fields)
        return _hold(await self._call("POST", "/v1/holds", body=body))

    async def commit_hold(self, hold_id: str, token: int) -> Hold:
        """Book a hold with the fencing token its placement answered."""
        path = f"/v1/holds/{_segment(hold_id)}/commit"
        return _hold(await self._call("POST", path, body={"token": token}))

    async def release_hold(self, hold_id: str) -> Hold:
        """Give a hold up (releasing it again answers it as it is)."""
        return _hold(await self._call("POST", f"/v1/holds/{_segment(hold_id)}/release"))

    async def get_hold(self, hold_id: str) -> Hold:
        """The hold as it is now."""
        return _hold(await self._call("GET", f"/v1/holds/{_segment(hold_id)}"))

    async def list_holds(
        self,
        *,
        workflow_id: str | None = None,
        status: str | list[str] | None = None,
        attendee: str | None = None,
        limit: int | None = None,
    ) -> list[Hold]:
        """The caller's holds, newest first, every page of them (``GET /v1/holds``).

        An agent back from a crash can ask what its workflow holds. ``status`` is
        one of ``held``, ``committed``, ``released``, ``expired``, ``preempted``
        or a list of them; ``limit`` stops after that many holds.
        """
        query = [("workflow_id", workflow_id), ("attendee", attendee)]
        wanted = status if status is None or isinstance(status, str) else ",".join(status)
        given = [(name, value) for name, value in (*query, ("status", wanted)) if value]
        found: list[Hold] = []
        cursor: str | None = None
        while limit is None or len(found) < limit:
            page = given + ([("cursor", cursor)] if cursor else [])
            _, _, doc = await self._call("GET", "/v1/holds", query=page)
            items = doc.get("items") if isinstance(doc, dict) else None
            found += [Hold.parse(item) for item in items or [] if isinstance(item, dict)]
            cursor = doc.get("next_cursor") if isinstance(doc, dict) else None
            if not isinstance(cursor, str) or not cursor:
                break
        return found if limit is None else found[:limit]

    async def find_free_slots(
        self, attendees: list[str], start: str, end: str, duration_minutes: int, **fields: Any
    ) -> Availability:
        """Busy intervals, free gaps and slots between ``start`` and ``end`` (``from``, ``to``).

        ``fields`` are the other query parameters (``limit``, ``timezone``).
        """
        fields = {name: value for name, value in fields.items() if value is not None}
        if any("," in a for a in attendees):
            # The query splits every attendees value at its commas, so a display
            # name holding one ("Doe, Dana <dana@x.com>") would read as two
            # attendees; the tool envelope carries the list as JSON.
            arguments = {"attendees": attendees, "from": start, "to": end,
                         "duration_minutes": duration_minutes, **fields}  # fmt: skip
            doc = await self.call_tool(FIND_FREE_SLOTS.name, arguments)
        else:
            query = [("attendees", a) for a in attendees]
            query += [("from", start), ("to", end), ("duration_minutes", str(duration_minutes))]
            query += [(name, str(value)) for name, value in fields.items()]
            _, _, doc = await self._call("GET", "/v1/availability", query=query)
        return Availability.parse(doc if isinstance(doc, dict) else {})

    async def call_tool(
        self,
        tool: str,
        arguments: dict[str, Any],
        *,
        workflow_id: str | None = None,
        step: int | None = None,
    ) -> dict[str, Any]:
        """Run a tool through ``POST /v1/tool-calls`` (the generic envelope); its document."""
        answer = await self.tool_answer(tool, arguments, workflow_id=workflow_id, step=step)
        return answer.document

    async def tool_answer(
        self,
        tool: str,
        arguments: dict[str, Any],
        *,
        workflow_id: str | None = None,
        step: int | None = None,
    ) -> ToolAnswer:
        """:meth:`call_tool`, with whether the answer was a replay and its key."""
        body: dict[str, Any] = {"tool": tool, "arguments": arguments}
        if workflow_id is not None:
            body["workflow_id"] = workflow_id
        if step is not None:
            body["step"] = step
        _, headers, doc = await self._call("POST", "/v1/tool-calls", body=body)
        return ToolAnswer.parse(doc, headers)

    # -- the wire ---------------------------------------------------------------

    async def _call(
        self,
        method: str,
        path: str,
        *,
        body: object = None,
        query: list[tuple[str, str]] | None = None,
    ) -> _Answer:
        # Encoded once: every retry sends these very bytes.
        data = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        if self._deadline is None:
            return await self._attempts(method, path, data, query)
        try:
            async with asyncio.timeout(self._deadline):
                return await self._attempts(method, path, data, query)
        except TimeoutError:
            detail = f"{method} {path}: no final answer within {self._deadline:g} s"
            raise Unreachable(0, "deadline_exceeded", detail, retryable=True) from None

    async def _attempts(
        self, method: str, path: str, data: bytes | None, query: list[tuple[str, str]] | None
    ) -> _Answer:
        policy = self._policy
        for retry in range(policy.retries + 1):
            last = retry == policy.retries
            failure: str | None = None
            try:
                status, headers, raw = await self._send(method, path, data, query)
            except (aiohttp.ClientError, TimeoutError) as exc:
                reason = "timeout" if isinstance(exc, TimeoutError) else "connection_error"
                failure = f"{reason}: {type(exc).__name__}"
                status, wait_for = 0, None
            if failure is not None:
                if last:
                    # Raised outside the except block: neither chained nor as its
                    # context, for aiohttp's errors carry the request, Authorization
                    # header and all, in their repr.
                    detail = f"{method} {path}: no answer after {retry + 1} attempts ({failure})"
                    raise Unreachable(0, reason, detail, retryable=True)
            else:
                if 200 <= status < 300:
                    return status, headers, document(method, path, status, raw)
                error = refusal(status, headers, raw)
                if last or not worth_retrying(error):
                    raise error
                reason, wait_for = error.code or f"http_{status}", error.retry_after
            await self._pause(RetryEvent(
                method, path, retry + 1, policy.delay(retry, wait_for, self._rng), status, reason,
            ))  # fmt: skip
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def _pause(self, event: RetryEvent) -> None:
        log.debug(
            "retry %d of %s %s in %.2f s (%s)",
            event.retry, event.method, event.path, event.delay, event.reason,
        )  # fmt: skip
        if self._on_retry is not None:
            self._on_retry(event)
        await self._sleep(event.delay)

    async def _send(
        self, method: str, path: str, data: bytes | None, query: list[tuple[str, str]] | None
    ) -> tuple[int, Mapping[str, str], bytes]:
        if self._closed:
            raise RuntimeError("this Slotward is closed")
        if self._session is None:
            self._session = aiohttp.ClientSession()
        headers = {"Authorization": self._auth, "Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = "application/json"
        async with self._session.request(
            method, self.url + path, data=data, params=query, headers=headers,
            timeout=self._timeout,
        ) as resp:  # fmt: skip
            return resp.status, resp.headers, await resp.read()


def _segment(hold_id: str) -> str:
    """``hold_id`` as one path segment: a ``/`` or ``?`` in it cannot reach another route."""
    if not isinstance(hold_id, str) or not hold_id:
        raise ValueError("hold_id must be a non-empty string")
    return quote(hold_id, safe="")


def _hold(answer: _Answer) -> Hold:
    _, headers, doc = answer
    return Hold.parse(doc if isinstance(doc, dict) else {}, headers)
