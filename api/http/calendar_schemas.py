"""Request and response shapes of the calendar binding API (beside api/http/schemas.py):
they validate input, and the OpenAPI document is generated from them."""

from __future__ import annotations

from slotward.api.calendars import MAX_PASSWORD, MAX_USERNAME
from slotward.engine.rules.calendar_documents import WRITE_STATES
from slotward.engine.rules.shapes import Field, Shape
from slotward.engine.rules.urls import MAX_URL

__all__ = ["CALENDAR", "CALENDAR_PUT"]

_POLICIES = ("fail_closed", "last_known")
CALENDAR_PUT = Shape(
    "CalendarPut",
    (
        Field(
            "provider", "string", required=True, min_length=1, max_length=64,
            description="An installed provider: 'caldav', 'ics' or a plugin's name",
            example="caldav",
        ),
        Field(
            "url", "string", required=True, min_length=1, max_length=MAX_URL,
            description="The calendar: a CalDAV collection, an ICS URL, or a file:// path "
            "(only where the server allows private URLs); no credentials in it",
            example="https://dav.example.com/alex/work/",
        ),
        Field("username", "string", nullable=True, min_length=1, max_length=MAX_USERNAME,
              description="For a provider that takes credentials"),
        Field("password", "string", nullable=True, min_length=1, max_length=MAX_PASSWORD,
              description="Stored sealed under the server's SLOTWARD_SECRET_KEY; never answered"),
        Field("timezone", "string", min_length=1, max_length=64,
              description="IANA zone that all-day and floating times are read in (default UTC)",
              example="Europe/Berlin"),
        Field("on_unavailable", "string", enum=_POLICIES,
              description="When the calendar cannot be read: refuse claims (fail_closed, the "
              "default) or decide on the last mirror (last_known)"),
    ),
    description="Bind an attendee to a calendar (replacing its binding)",
)  # fmt: skip
_WRITES = Shape(
    "CalendarWriteCounts",
    tuple(Field(state, "integer", required=True) for state in WRITE_STATES),
    description="slotward's own events bound for the calendar, by delivery state",
)
_COVERS = Shape(
    "CalendarCovers",
    (Field("from", "string", required=True), Field("to", "string", required=True)),
    description="The window the mirror holds",
)
_SYNC = Shape(
    "CalendarSync",
    (
        Field("status", "string", required=True, enum=("pending", "ok", "error")),
        Field("external_as_of", "string", required=True, nullable=True,
              description="When the last successful read began: how old the mirror is"),
        Field("error", "string", required=True, nullable=True,
              description="Why the last read failed (never a credential)"),
        Field("error_at", "string", required=True, nullable=True),
        Field("failures", "integer", required=True, description="Reads failed in a row"),
        Field("covers", "object", required=True, nullable=True, shape=_COVERS),
        Field("writes", "object", required=True, shape=_WRITES),
    ),
)  # fmt: skip
CALENDAR = Shape(
    "Calendar",
    (
        Field("attendee", "string", required=True, description="The attendee id"),
        Field("provider", "string", required=True),
        Field("url", "string", required=True),
        Field("username", "string", required=True, nullable=True),
        Field("has_password", "boolean", required=True,
              description="Whether a password is stored (it is never shown)"),
        Field("timezone", "string", required=True),
        Field("on_unavailable", "string", required=True, enum=_POLICIES),
        Field("created_at", "string", required=True),
        Field("updated_at", "string", required=True),
        Field("sync", "object", required=True, shape=_SYNC),
    ),
)  # fmt: skip
