"""The one place errors become responses: RFC 9457 problem+json.

The middleware walks nothing by hand: every error slotward raises on purpose is
a :class:`SlotwardError` carrying its code and retryability, and its code gives
its status (api/http/statuses.py); aiohttp's
own HTTP errors (unknown route, wrong method) are translated to the same form;
anything else is a 500 that is logged and never leaks internals. The answers
api/http/edges.py gives before the app runs (a request the HTTP parser refused, a
connection past the cap, an ``Expect`` not served) are built here too; none of
them quotes what the client sent.
"""

from __future__ import annotations

import json
import logging
from http import HTTPStatus
from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import (
    BadHttpMethod,
    BadStatusLine,
    HttpProcessingError,
    InvalidHeader,
    InvalidURLError,
    LineTooLong,
)
from aiohttp.typedefs import Handler

from slotward.api.http.jsonbody import ClientClosed
from slotward.api.http.statuses import CLIENT_CLOSED, STATUSES, status_of
from slotward.engine.errors import SlotwardError

__all__ = [
    "PROBLEM_TYPE",
    "early_http_problem",
    "internal_error",
    "parser_refusal",
    "problem_document",
    "problem_middleware",
    "problem_of",
    "problem_response",
    "too_many_connections",
    "unsupported_expectation",
]

log = logging.getLogger("slotward.api")

PROBLEM_TYPE = "application/problem+json"


def problem_document(error: SlotwardError) -> dict[str, Any]:
    """``error`` as the problem+json document its answer would carry, as a dict
    (a batch of tool calls answers each call's problem inside one body)."""
    return _problem(status_of(error), error.title, error.code, error.detail,
                    retryable=error.retryable, extra=error.extra)  # fmt: skip


def _problem(
    status: int,
    title: str,
    code: str,
    detail: str,
    *,
    retryable: bool = False,
    extra: dict[str, Any] | None = None,
) -> dict[str, Any]:
    return {
        "type": f"urn:slotward:problem:{code}",
        "title": title,
        "status": status,
        "detail": detail,
        "code": code,
        "retryable": retryable,
        **(extra or {}),
    }


def _problem_body(
    status: int,
    title: str,
    code: str,
    detail: str,
    *,
    retryable: bool = False,
    extra: dict[str, Any] | None = None,
) -> bytes:
    body = _problem(status, title, code, detail, retryable=retryable, extra=extra)
    return json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode()


def problem_response(
    status: int,
    title: str,
    code: str,
    detail: str,
    *,
    retryable: bool = False,
    extra: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
) -> web.Response:
    if status == 401:
        # RFC 9110 section 11.6.1: a 401 names the scheme that would be accepted.
        challenge = 'Bearer realm="slotward"'
        if code == "invalid_api_key":
            challenge += ', error="invalid_token"'  # RFC 6750 section 3.1
        headers = {**(headers or {}), "WWW-Authenticate": challenge}
    return web.Response(
        status=status,
        body=_problem_body(status, title, code, detail, retryable=retryable, extra=extra),
        content_type=PROBLEM_TYPE,
        headers=headers,
    )


def _from_error(error: SlotwardError) -> web.Response:
    headers: dict[str, str] = {}
    if error.retry_after is not None:
        headers["Retry-After"] = str(error.retry_after)
    if error.idempotency_key is not None:
        headers["Idempotency-Key"] = error.idempotency_key
        headers["Idempotent-Replayed"] = "false"
    return problem_response(
        status_of(error),
        error.title,
        error.code,
        error.detail,
        retryable=error.retryable,
        extra=error.extra,
        headers=headers,
    )


def _from_http(exc: web.HTTPException) -> web.Response:
    code = {404: "route_not_found", 405: "method_not_allowed"}.get(exc.status, "http_error")
    headers = {"Allow": exc.headers["Allow"]} if "Allow" in exc.headers else None
    return problem_response(exc.status, exc.reason, code, exc.text or exc.reason, headers=headers)


@web.middleware
async def problem_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return _from_http(exc)
    except Exception as exc:
        return problem_of(exc, request.method, request.path)


def problem_of(exc: Exception, method: str, path: str) -> web.Response:
    """The answer to ``exc``, raised while answering ``method path`` (also the front's
    requests: api/http/front.py); an unexpected one is logged."""
    if isinstance(exc, SlotwardError):
        return _from_error(exc)
    if isinstance(exc, ClientClosed):
        # Not an error of ours, and no answer reaches anyone: an info line.
        log.info("client closed the connection during %s %s", method, path)
        return web.Response(status=CLIENT_CLOSED)
    log.error("unhandled error on %s %s", method, path, exc_info=exc)
    return internal_error()


def internal_error() -> web.Response:
    return problem_response(
        STATUSES["internal_error"], "Internal error", "internal_error",
        "an unexpected error occurred", retryable=True,
    )  # fmt: skip


# What a refused head is told: chosen by the exception's class, never its
# message (aiohttp's messages quote the bytes it refused, a bearer key included).
_FAULTS: tuple[tuple[type[HttpProcessingError], str], ...] = (
    (LineTooLong, "a request line or header field is longer than the server accepts"),
    (BadHttpMethod, "the request method is not a valid HTTP token"),
    (BadStatusLine, "the request line is not 'METHOD target HTTP/1.x' ended by CRLF"),
    (InvalidURLError, "the request target is not a valid URL"),
    (InvalidHeader, "a header name or value is not valid"),
)
_DEFAULT_FAULT = (
    "the request is not valid HTTP/1.1: every line must end in CRLF and hold no control characters"
)


def parser_refusal(exc: BaseException | None) -> web.Response:
    """400 ``malformed_request`` for a request aiohttp's HTTP parser refused."""
    detail = next((d for kind, d in _FAULTS if isinstance(exc, kind)), _DEFAULT_FAULT)
    resp = problem_response(
        STATUSES["malformed_request"], "Bad Request", "malformed_request", detail
    )
    resp.headers["Connection"] = "close"  # said, not only implied by aiohttp's HTTP/1.0
    return resp


def unsupported_expectation() -> web.Response:
    """417 for an ``Expect`` other than 100-continue (aiohttp's own quotes the header)."""
    return problem_response(
        STATUSES["unsupported_expectation"], "Expectation Failed", "unsupported_expectation",
        "the only expectation served is 'Expect: 100-continue'",
    )  # fmt: skip


def early_http_problem(exc: web.HTTPException) -> web.Response:
    """An aiohttp HTTP error raised before the middleware ran; its text is not passed on."""
    return problem_response(exc.status, exc.reason, "http_error", exc.reason)


def too_many_connections(server: str) -> bytes:
    """The whole HTTP/1.1 answer to a connection past the cap, sent before any request."""
    status = STATUSES["too_many_connections"]
    body = _problem_body(
        status, HTTPStatus(status).phrase, "too_many_connections",
        "this server process has as many connections open as it accepts; retry shortly",
        retryable=True,
    )  # fmt: skip
    head = (
        f"HTTP/1.1 {status} {HTTPStatus(status).phrase}\r\n"
        f"Server: {server}\r\n"
        f"Content-Type: {PROBLEM_TYPE}\r\n"
        f"Content-Length: {len(body)}\r\n"
        "Retry-After: 1\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode("ascii") + body
