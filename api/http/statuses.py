"""The HTTP status of every error code: the engine's codes carry none.

A code answers with the status of its family in the catalogue (engine/codes.py):
the first class of its ancestry listed below, as Starlette maps exceptions; the
codes the edge answers by itself have theirs here. ``STATUSES`` holds every
catalogued code; api/http/problems.py builds the answers from it, and the
metrics count them by it.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Final

from slotward.engine.codes import CODES
from slotward.engine.errors import (
    BodyTooLarge,
    Conflict,
    Forbidden,
    InvalidRequest,
    MalformedBody,
    NotFound,
    RateLimited,
    RequestTimeout,
    SlotwardError,
    Unauthenticated,
    Unavailable,
)

__all__ = ["CLIENT_CLOSED", "STATUSES", "family_status", "status_of"]

# "Client closed request", as proxies count it: the client hung up before its
# body was whole (api/http/jsonbody.py ClientClosed). Counted and logged, never sent.
CLIENT_CLOSED: Final = 499

# Most specific first: a subclass before its base.
_FAMILIES: Final[tuple[tuple[type[SlotwardError], int], ...]] = (
    (MalformedBody, 400),
    (BodyTooLarge, 413),
    (RequestTimeout, 408),
    (InvalidRequest, 422),
    (Unauthenticated, 401),
    (Forbidden, 403),
    (NotFound, 404),
    (Conflict, 409),
    (RateLimited, 429),
    (Unavailable, 503),
    (SlotwardError, 500),  # ConfigError too: a refused setting is no client's fault
)

# The edge's own answers (api/http/problems.py); http_error carries the status
# aiohttp raised, 400 for most.
_EDGE: Final[Mapping[str, int]] = {
    "malformed_request": 400,
    "unsupported_expectation": 417,
    "too_many_connections": 503,
    "route_not_found": 404,
    "method_not_allowed": 405,
    "http_error": 400,
}


def family_status(kind: type[SlotwardError]) -> int:
    """The status of the first family in ``kind``'s ancestry."""
    return next(status for family, status in _FAMILIES if issubclass(kind, family))


STATUSES: Final[Mapping[str, int]] = MappingProxyType(
    {
        name: _EDGE[name] if code.family is None else family_status(code.family)
        for name, code in CODES.items()
    }
)
"""Every catalogued code and the status it answers with."""


def status_of(error: SlotwardError) -> int:
    """The status ``error`` answers with: its code's, else (uncatalogued) its family's."""
    return STATUSES.get(error.code) or family_status(type(error))
