"""The one place errors become responses: RFC 9457 problem+json.

The middleware walks nothing by hand: every error slotward raises on purpose is
a :class:`SlotwardError` carrying its status, code and retryability; aiohttp's
own HTTP errors (unknown route, wrong method) are translated to the same form;
anything else is a 500 that is logged and never leaks internals.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from aiohttp import web
from aiohttp.typedefs import Handler

from slotward.engine.errors import SlotwardError

__all__ = ["PROBLEM_TYPE", "problem_body", "problem_middleware", "problem_response"]

log = logging.getLogger("slotward.api")

PROBLEM_TYPE = "application/problem+json"


def problem_body(
    status: int,
    title: str,
    code: str,
    detail: str,
    *,
    retryable: bool = False,
    extra: dict[str, Any] | None = None,
) -> bytes:
    """The problem+json document, as bytes (api/edges.py writes one before any request)."""
    body = {
        "type": f"urn:slotward:problem:{code}",
        "title": title,
        "status": status,
        "detail": detail,
        "code": code,
        "retryable": retryable,
        **(extra or {}),
    }
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
        body=problem_body(status, title, code, detail, retryable=retryable, extra=extra),
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
        error.status,
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
    except SlotwardError as error:
        return _from_error(error)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise
        return _from_http(exc)
    except Exception:
        log.exception("unhandled error on %s %s", request.method, request.path)
        return problem_response(
            500, "Internal error", "internal_error", "an unexpected error occurred", retryable=True
        )
