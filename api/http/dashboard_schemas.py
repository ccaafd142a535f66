"""Request and response shapes of the dashboard's routes (beside api/http/schemas.py):
the session, the timeline and the workflows' replay counts."""

from __future__ import annotations

from slotward.api.http.schemas import HOLD
from slotward.engine.rules.shapes import Field, Shape

__all__ = ["SESSION", "SESSION_SIGN_IN", "TIMELINE", "WORKFLOW_LIST"]

SESSION_SIGN_IN = Shape(
    "SessionSignIn",
    (
        Field(
            "key", "string", required=True, min_length=1, max_length=512,
            description="A reviewer's or an admin's API key; it is not kept, the cookie is",
        ),
    ),
    description="Sign in to the dashboard: the answer sets the session cookie",
)  # fmt: skip
SESSION = Shape(
    "Session",
    (
        Field("tenant", "string", required=True),
        Field("agent_id", "string", required=True),
        Field("role", "string", required=True, enum=("reviewer", "admin")),
        Field(
            "csrf_token", "string", required=True,
            description="Send it as X-CSRF-Token on every change made with the cookie",
        ),
        Field("expires_at", "string", required=True),
    ),
)  # fmt: skip
_SPAN = Shape(
    "BusySpan", (Field("start", "string", required=True), Field("end", "string", required=True))
)
_ROW = Shape(
    "TimelineAttendee",
    (
        Field("id", "string", required=True),
        Field("name", "string", required=True, nullable=True),
        Field("emails", "array", required=True, items=Field("email", "string")),
        Field(
            "holds", "array", required=True, items=HOLD,
            description="Holds of any status with this attendee overlapping the window",
        ),
        Field(
            "external", "array", required=True, items=_SPAN,
            description="Busy time of the attendee's bound calendar, as last read (the mirror)",
        ),
        Field(
            "external_as_of", "string", required=True, nullable=True,
            description="When the calendar was last read; null: none bound, or never read",
        ),
        Field(
            "calendar", "string", required=True, nullable=True,
            enum=("pending", "ok", "error"),
            description="The state of the bound calendar's reads; null: none bound",
        ),
    ),
)  # fmt: skip
TIMELINE = Shape(
    "Timeline",
    (
        Field("from", "string", required=True),
        Field("to", "string", required=True),
        Field("attendees", "array", required=True, items=_ROW),
        Field(
            "truncated", "boolean", required=True,
            description="More holds overlap the window than one answer shows: narrow it",
        ),
    ),
)  # fmt: skip
_REPLAYS = Shape(
    "WorkflowReplays",
    (
        Field("workflow_id", "string", required=True),
        Field("replays", "integer", required=True),
        Field("last_replay_at", "string", required=True, nullable=True),
        Field("storms", "integer", required=True),
        Field("storm_at", "string", required=True, nullable=True),
    ),
)
WORKFLOW_LIST = Shape(
    "WorkflowList",
    (
        Field("items", "array", required=True, items=_REPLAYS),
        Field("next_cursor", "string", required=True, nullable=True),
    ),
)
