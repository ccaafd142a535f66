"""The public JSON form of a calendar binding (the binding API, admins only).

Beside engine/rules/documents.py, in its style. A binding's document never
carries its password, sealed or not: only whether it has one. The sync state
says how fresh the mirror is (``external_as_of``: when the last successful
read began) and what the last failure was; ``writes`` counts slotward's own
events bound for the calendar by their delivery state.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from slotward.engine.calendars import CalendarBinding
from slotward.engine.rules.timenorm import format_instant

__all__ = ["WRITE_STATES", "binding_document"]

WRITE_STATES = ("pending", "delivered", "dead")


def _instant(value: datetime | None) -> str | None:
    return None if value is None else format_instant(value)


def _covers(binding: CalendarBinding) -> dict[str, str] | None:
    if binding.covers_from is None or binding.covers_until is None:
        return None
    return {"from": format_instant(binding.covers_from), "to": format_instant(binding.covers_until)}


def binding_document(binding: CalendarBinding, writes: Mapping[str, int]) -> dict[str, Any]:
    """``binding`` as its tenant's admins see it; ``writes`` is the count of its
    calendar writes by state (a state left out has none)."""
    return {
        "attendee": binding.attendee,
        "provider": binding.provider,
        "url": binding.url,
        "username": binding.username,
        "has_password": binding.password is not None,
        "timezone": binding.timezone,
        "on_unavailable": binding.on_unavailable,
        "created_at": format_instant(binding.created_at),
        "updated_at": format_instant(binding.updated_at),
        "sync": {
            "status": binding.status,
            "external_as_of": _instant(binding.synced_at),
            "error": binding.error,
            "error_at": _instant(binding.error_at),
            "failures": binding.failures,
            "covers": _covers(binding),
            "writes": {state: writes.get(state, 0) for state in WRITE_STATES},
        },
    }
