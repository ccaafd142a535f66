"""Tool calls sent to a slotward server: ``POST /v1/tool-calls``, by the Python client.

:class:`~slotward.api.client.Slotward` sends them, so a call that got no
answer, a 429, a 503 or a ``request_in_progress`` is retried with the same
body (the server derives the key: a retry lands once). Over streamable HTTP
each request may carry its own key, so a client is made per call on one shared
aiohttp session. The API key travels in the Authorization header only: it is in
no repr, log line or answer.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
from yarl import URL

from slotward.api.client import Slotward, SlotwardError, Unreachable
from slotward.api.mcp.results import NO_KEY, Answer, problem_answer
from slotward.engine.errors import ConfigError, Unauthenticated, Unavailable

__all__ = ["Remote", "check_url", "open_remote"]

# Each attempt; the whole call (retries and Retry-After waits included) is
# bounded too, so an MCP client's own timeout is not what ends it.
_ATTEMPT_SECONDS = 30.0
_CALL_SECONDS = 60.0
_RETRIES = 3


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
        self._url = str(url)
        self._session = session

    def __repr__(self) -> str:
        return f"Remote({self._url!r})"

    async def call(self, envelope: Mapping[str, Any], key: str | None) -> Answer:
        if not key:
            return problem_answer(Unauthenticated(NO_KEY, code="missing_api_key"))
        try:
            client = Slotward(
                self._url, key, session=self._session, timeout=_ATTEMPT_SECONDS,
                retries=_RETRIES, deadline=_CALL_SECONDS,
            )  # fmt: skip
        except ValueError:  # a key no server would take; its text is not repeated
            return problem_answer(Unauthenticated("invalid API key", code="invalid_api_key"))
        try:
            got = await client.tool_answer(
                envelope["tool"], dict(envelope["arguments"]),
                workflow_id=envelope.get("workflow_id"), step=envelope.get("step"),
            )  # fmt: skip
        except Unreachable as error:
            # The reason only: an aiohttp message may quote the request.
            return problem_answer(Unavailable(f"the slotward server did not answer ({error.code})"))
        except SlotwardError as error:
            return _problem(error)
        return Answer(got.document, replayed=got.replayed, idempotency_key=got.idempotency_key)


def _problem(error: SlotwardError) -> Answer:
    if not error.problem:  # no problem document: a non-JSON answer, 2xx or not
        return problem_answer(
            Unavailable(f"the slotward server answered {error.status} without a JSON document")
        )
    document = dict(error.problem)
    if error.retry_after is not None:
        document["retry_after"] = round(error.retry_after)
    return Answer(document, is_problem=True, idempotency_key=error.idempotency_key)


@asynccontextmanager
async def open_remote(url: URL) -> AsyncIterator[Remote]:
    async with aiohttp.ClientSession() as session:
        yield Remote(url, session)
