"""Tool calls sent to a slotward server: ``POST /v1/tool-calls``.

The one module that speaks HTTP to the server, written against aiohttp for now;
``slotward.api.client.Slotward.call_tool`` does the same with retries, and may
replace :meth:`Remote.call` whole. The API key travels in the Authorization
header only: it is in no repr, log line or answer.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
from yarl import URL

from slotward.api.mcp.results import NO_KEY, Answer, problem_answer
from slotward.engine.errors import ConfigError, Unauthenticated, Unavailable

__all__ = ["Remote", "check_url", "open_remote"]

_TIMEOUT_SECONDS = 30.0


def check_url(raw: str) -> URL:
    """The server's base URL: http(s), a host, no credentials, query or fragment."""
    try:
        url = URL(raw)
    except ValueError as error:
        raise ConfigError(f"--url is not a URL: {error}") from None
    if url.scheme not in ("http", "https") or not url.host:
        raise ConfigError("--url must be an http:// or https:// URL with a host")
    if url.user is not None or url.password is not None:
        raise ConfigError("--url must carry no credentials: give the key with --key")
    if url.query_string or url.fragment:
        raise ConfigError("--url must have no query or fragment")
    return url


class Remote:
    """Runs tool calls on the server at ``url``."""

    def __init__(self, url: URL, session: aiohttp.ClientSession) -> None:
        self._endpoint = url / "v1" / "tool-calls"
        self._session = session

    def __repr__(self) -> str:
        return f"Remote({str(self._endpoint)!r})"

    async def call(self, envelope: Mapping[str, Any], key: str | None) -> Answer:
        if not key:
            return problem_answer(Unauthenticated(NO_KEY, code="missing_api_key"))
        try:
            async with self._session.post(
                self._endpoint, json=dict(envelope), headers={"Authorization": f"Bearer {key}"}
            ) as resp:
                body = await resp.read()
                status, headers = resp.status, resp.headers
        except (TimeoutError, aiohttp.ClientError) as error:
            # The class only: an aiohttp message may quote the request.
            return problem_answer(
                Unavailable(f"the slotward server did not answer ({type(error).__name__})")
            )
        return _answer(status, headers, body)


def _answer(status: int, headers: Mapping[str, str], body: bytes) -> Answer:
    try:
        document = json.loads(body)
    except ValueError:
        document = None
    if not isinstance(document, dict):
        return problem_answer(
            Unavailable(f"the slotward server answered {status} without a JSON document")
        )
    replayed = headers.get("Idempotent-Replayed")
    key = headers.get("Idempotency-Key")
    if status >= 400:
        retry_after = headers.get("Retry-After", "")
        if retry_after.isdigit():
            document = {**document, "retry_after": int(retry_after)}
        return Answer(document, is_problem=True, idempotency_key=key)
    return Answer(
        document, replayed=None if replayed is None else replayed == "true", idempotency_key=key
    )


@asynccontextmanager
async def open_remote(url: URL) -> AsyncIterator[Remote]:
    timeout = aiohttp.ClientTimeout(total=_TIMEOUT_SECONDS)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        yield Remote(url, session)
