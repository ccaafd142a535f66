"""Path and query parameters: read strictly, refused with a clear 422."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar

from aiohttp import web
from aiohttp.typedefs import Handler

from slotward.engine.errors import ValidationFailed

__all__ = [
    "QUERY_NAMES",
    "QUERY_REPEATABLE",
    "check_query",
    "query_choices",
    "query_int",
    "refuse_nul",
    "required",
]

T = TypeVar("T")

_MAX_DIGITS = 15  # below 2**53: every accepted value is an exact I-JSON integer


def required(request: web.Request, name: str) -> str:
    value = request.query.get(name)
    if not value:
        raise ValidationFailed(
            f"query parameter {name!r} is required", code="missing_field", extra={"field": name}
        )
    return value


@web.middleware
async def refuse_nul(request: web.Request, handler: Handler) -> web.StreamResponse:
    """A NUL in a (decoded) path or query value is refused before any handler.

    It is valid in a URL, but no text column can store or even compare it
    (PostgreSQL refuses it), so it would otherwise end as a 500.
    """
    if "\x00" in request.path:
        raise ValidationFailed("the path contains a NUL character", code="invalid_field",
                               extra={"field": "path"})  # fmt: skip
    if not request.query_string:  # most calls: no query to parse
        return await handler(request)
    for name, value in request.query.items():
        if "\x00" in name or "\x00" in value:
            raise ValidationFailed(f"query parameter {name!r} contains a NUL character",
                                   code="invalid_field", extra={"field": name})  # fmt: skip
    return await handler(request)


# The query parameters the matched route takes, and those of them that may
# repeat (set by the app for each route).
QUERY_NAMES = web.RequestKey("slotward.query_names", frozenset)
QUERY_REPEATABLE = web.RequestKey("slotward.query_repeatable", frozenset)


def check_query(request: web.Request) -> None:
    """Refuse query parameters the route does not declare (422 ``unknown_field``).

    As unknown body fields are refused: a misspelt filter (``?workflow=``)
    silently ignored would answer a different question than the one asked.
    """
    if not request.query_string:  # most calls: nothing to refuse
        return
    allowed: frozenset[str] = request.get(QUERY_NAMES, frozenset())
    unknown = sorted(set(request.query) - allowed)
    if unknown:
        raise ValidationFailed(
            f"unknown query parameter {unknown[0]!r}",
            code="unknown_field",
            extra={"field": unknown[0], "allowed": sorted(allowed)},
        )
    repeatable: frozenset[str] = request.get(QUERY_REPEATABLE, frozenset())
    # As duplicate JSON keys are refused: which of ``?status=held&status=expired``
    # was meant cannot be known, and taking the first answers another question.
    twice = sorted(n for n in set(request.query) - repeatable if len(request.query.getall(n)) > 1)
    if twice:
        raise ValidationFailed(
            f"query parameter {twice[0]!r} is given more than once",
            code="duplicate_field",
            extra={"field": twice[0]},
        )


def query_int(request: web.Request, name: str, low: int, high: int) -> int | None:
    """The integer in ``name`` (ASCII digits only), or None when absent."""
    raw = request.query.get(name)
    if raw is None:
        return None
    # str.isdigit() alone also accepts digits such as '²', which int() refuses.
    ok = raw.isascii() and raw.isdigit() and len(raw) <= _MAX_DIGITS
    if not ok or not low <= int(raw) <= high:
        raise ValidationFailed(
            f"{name!r} must be an integer from {low} to {high}",
            code="invalid_field",
            extra={"field": name},
        )
    return int(raw)


def query_choices(request: web.Request, name: str, choices: Mapping[str, T]) -> list[T] | None:
    """A comma-separated list of ``choices`` in ``name`` (``?status=held,expired``),
    or None when absent; an empty list or an unknown choice is a 422."""
    raw = request.query.get(name)
    if raw is None:
        return None
    wanted = [part.strip() for part in raw.split(",") if part.strip()]
    if not wanted or any(w not in choices for w in wanted):
        raise ValidationFailed(
            f"{name} must be a comma-separated list of {', '.join(choices)}",
            code="invalid_field",
            extra={"field": name},
        )
    return [choices[w] for w in wanted]
