"""The client's side of the wire: one call's attempts, its retries and its deadline.

:class:`Wire` sends a call (encoded once: every retry sends the very same
bytes), retries what may succeed on a second try (api/client/retry.py says
which and how long it waits) and turns a final refusal into the error tree of
api/client/errors.py. The calls themselves, and their typed answers, are the
client's (api/client/session.py).
"""

from __future__ import annotations

import asyncio
import json
import logging
import random
from collections.abc import Awaitable, Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

import aiohttp

from slotward.api.client.answers import document, refusal, worth_retrying
from slotward.api.client.errors import Unreachable
from slotward.api.client.retry import RetryEvent, RetryPolicy

__all__ = ["Answer", "Wire"]

log = logging.getLogger("slotward.client")

Answer = tuple[int, Mapping[str, str], Any]
"""A 2xx answer: its status, headers and JSON document."""


class Wire:
    """The HTTP side of one client: a server, a key, and how calls are retried.

    The options are :class:`~slotward.api.client.session.Slotward`'s, which
    documents them.
    """

    def __init__(
        self,
        url: str,
        key: str,
        *,
        timeout: float,
        session: aiohttp.ClientSession | None,
        deadline: float | None,
        policy: RetryPolicy,
        on_retry: Callable[[RetryEvent], None] | None,
        sleep: Callable[[float], Awaitable[None]],
        rng: random.Random | None,
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
        self._timeout = timeout
        self._deadline = deadline
        self._policy = policy
        self._on_retry = on_retry
        self._sleep = sleep
        self._rng = rng or random.Random()
        self._session = session
        self._owns_session = session is None
        self._closed = False

    def __repr__(self) -> str:
        return f"Wire(url={self.url!r})"

    async def close(self) -> None:
        """Close the session this wire opened (one passed in is left open); no call after."""
        self._closed = True
        if self._owns_session and self._session is not None:
            await self._session.close()
            self._session = None

    async def call(
        self,
        method: str,
        path: str,
        *,
        body: object = None,
        query: list[tuple[str, str]] | None = None,
        wait: float = 0,
    ) -> Answer:
        """Send a call until it has a final answer; raise the error a refusal is.

        ``wait`` is how long the server may hold the answer on purpose (a long
        poll): each attempt's timeout and the call's deadline are that much longer.
        """
        # Encoded once: every retry sends these very bytes.
        data = None if body is None else json.dumps(body, separators=(",", ":")).encode()
        if self._deadline is None:
            return await self._attempts(method, path, data, query, wait)
        try:
            async with asyncio.timeout(self._deadline + wait):
                return await self._attempts(method, path, data, query, wait)
        except TimeoutError:
            detail = f"{method} {path}: no final answer within {self._deadline + wait:g} s"
            raise Unreachable(0, "deadline_exceeded", detail, retryable=True) from None

    async def _attempts(
        self,
        method: str,
        path: str,
        data: bytes | None,
        query: list[tuple[str, str]] | None,
        wait: float,
    ) -> Answer:
        policy = self._policy
        for retry in range(policy.retries + 1):
            last = retry == policy.retries
            failure: str | None = None
            try:
                status, headers, raw = await self._send(method, path, data, query, wait)
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
        self,
        method: str,
        path: str,
        data: bytes | None,
        query: list[tuple[str, str]] | None,
        wait: float,
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
            timeout=aiohttp.ClientTimeout(total=self._timeout + wait),
        ) as resp:  # fmt: skip
            return resp.status, resp.headers, await resp.read()
