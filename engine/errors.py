"""The one exception tree of slotward.

    SlotwardError
    ├── InvalidRequest            the call can never succeed as sent
    │   ├── MalformedBody         not JSON, bad UTF-8, duplicate keys, NaN ...
    │   ├── BodyTooLarge          past the size the server reads
    │   ├── RequestTimeout        the body did not arrive in time, retryable
    │   └── ValidationFailed      well-formed JSON that breaks a rule
    ├── Unauthenticated           no credential, or one slotward does not know
    ├── Forbidden                 a credential not allowed to do this
    ├── NotFound                  no such object (also for another tenant's objects)
    ├── Conflict                  the state of the world disagrees
    │   ├── SlotConflict          slot_conflict, with conflicts and alternatives
    │   ├── InProgress            request_in_progress, retryable
    │   └── LeaseLost             lease_lost: a completion without the current lease
    ├── RateLimited               this agent is over its request rate, retryable
    ├── Unavailable               the store could not be reached in time, retryable
    └── ConfigError               a setting slotward refuses: nothing starts

Each error carries a stable ``code`` (the contract with clients; every code is
in engine/codes.py), whether the same call may succeed later (``retryable``), a
human ``detail`` and optional ``extra`` members that the problem+json body
includes. The engine knows no HTTP status: api/http/statuses.py gives each code
its status, and the API maps this tree to responses in exactly one place
(api/http/problems.py).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

__all__ = [
    "BodyTooLarge",
    "ConfigError",
    "Conflict",
    "Forbidden",
    "InProgress",
    "InvalidRequest",
    "LeaseLost",
    "MalformedBody",
    "NotFound",
    "RateLimited",
    "RequestTimeout",
    "SlotConflict",
    "SlotwardError",
    "Unauthenticated",
    "Unavailable",
    "ValidationFailed",
    "answering_for",
]


class SlotwardError(Exception):
    """Root of every error slotward raises on purpose."""

    title: str = "Internal error"
    default_code: str = "internal_error"
    default_retryable: bool = False

    def __init__(
        self,
        detail: str,
        *,
        code: str | None = None,
        retryable: bool | None = None,
        extra: Mapping[str, Any] | None = None,
        retry_after: int | None = None,
    ) -> None:
        super().__init__(detail)
        self.detail = detail
        self.code = code or self.default_code
        self.retryable = self.default_retryable if retryable is None else retryable
        self.extra: dict[str, Any] = dict(extra or {})
        self.retry_after = retry_after
        # Set when the error answers a mutating call whose key is known, so the
        # response still carries Idempotency-Key (nothing is stored for it).
        self.idempotency_key: str | None = None


class InvalidRequest(SlotwardError):
    title = "Invalid request"
    default_code = "invalid_request"


class MalformedBody(InvalidRequest):
    title = "Malformed body"
    default_code = "malformed_body"


class BodyTooLarge(InvalidRequest):
    title = "Body too large"
    default_code = "body_too_large"


class RequestTimeout(InvalidRequest):
    title = "Request timeout"
    default_code = "body_timeout"
    default_retryable = True


class ValidationFailed(InvalidRequest):
    title = "Validation failed"
    default_code = "validation_failed"


class Unauthenticated(SlotwardError):
    title = "Unauthenticated"
    default_code = "unauthenticated"


class Forbidden(SlotwardError):
    title = "Forbidden"
    default_code = "forbidden"


class NotFound(SlotwardError):
    title = "Not found"
    default_code = "not_found"


class Conflict(SlotwardError):
    title = "Conflict"
    default_code = "conflict"


class SlotConflict(Conflict):
    title = "Slot conflict"
    default_code = "slot_conflict"


class InProgress(Conflict):
    title = "Request in progress"
    default_code = "request_in_progress"
    default_retryable = True


class LeaseLost(Conflict):
    title = "Lease lost"
    default_code = "lease_lost"


class RateLimited(SlotwardError):
    title = "Too many requests"
    default_code = "rate_limited"
    default_retryable = True


class Unavailable(SlotwardError):
    title = "Service unavailable"
    default_code = "store_unavailable"
    default_retryable = True


class ConfigError(SlotwardError):
    """A setting refused at start (the environment, a flag): no request is answered with it."""

    title = "Invalid configuration"
    default_code = "invalid_config"


@contextmanager
def answering_for(key: str) -> Iterator[None]:
    """Tag errors raised inside with the idempotency key of the call they answer."""
    try:
        yield
    except SlotwardError as error:
        if error.idempotency_key is None:
            error.idempotency_key = key
        raise
