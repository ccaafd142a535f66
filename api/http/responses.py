"""HTTP answers of the services' results, and the one request header they read."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from slotward.engine.model import Reply
from slotward.engine.rules.documents import encode

__all__ = [
    "REPLY",
    "client_key",
    "json_response",
    "reply_headers",
    "reply_response",
    "reply_status",
]

JSON = "application/json"


# The Reply behind a response, for the telemetry middleware.
REPLY = web.ResponseKey("slotward.reply", Reply)


def reply_status(reply: Reply) -> int:
    """202 for a call waiting for a person, 201 for a new resource, else 200."""
    return 202 if reply.accepted else 201 if reply.created else 200


def reply_response(reply: Reply) -> web.Response:
    """A mutating call's answer, with its idempotency headers.

    202 for a call waiting for a person (a gated commit), with the approval's
    ``Location``; a replayed approval request says the approval's status now.
    """
    # The type as a header, not content_type=: aiohttp would parse it back (the
    # same bytes on the wire, some microseconds a call less).
    response = web.Response(status=reply_status(reply), body=reply.body,
                            headers=dict(reply_headers(reply)))  # fmt: skip
    response[REPLY] = reply
    return response


def reply_headers(reply: Reply) -> list[tuple[str, str]]:
    """The headers of a mutating call's answer but its length (and the server's own)."""
    headers = [
        ("Content-Type", JSON),
        ("Idempotency-Key", reply.key),
        ("Idempotent-Replayed", "true" if reply.replayed else "false"),
    ]
    if reply.hold_status is not None:
        headers.append(("Slotward-Hold-Status", reply.hold_status))
    if reply.approval_status is not None:
        headers.append(("Slotward-Approval-Status", reply.approval_status))
    if reply.approval_id is not None and (reply.accepted or reply.created):
        headers.append(("Location", f"/v1/approvals/{reply.approval_id}"))
    return headers


def json_response(doc: Any, status: int = 200) -> web.Response:
    return web.Response(status=status, body=encode(doc), content_type=JSON)


def client_key(request: web.Request) -> str | None:
    """The client's own ``Idempotency-Key`` as sent; the service checks it."""
    return request.headers.get("Idempotency-Key")
