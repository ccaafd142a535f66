"""Query parameters: read strictly, refused with a clear 422."""

from __future__ import annotations

from aiohttp import web

from slotward.engine.errors import ValidationFailed

__all__ = ["query_int", "required"]

_MAX_DIGITS = 15  # below 2**53: every accepted value is an exact I-JSON integer


def required(request: web.Request, name: str) -> str:
    value = request.query.get(name)
    if not value:
        raise ValidationFailed(
            f"query parameter {name!r} is required", code="missing_field", extra={"field": name}
        )
    return value


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
