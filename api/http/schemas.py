"""Request and response shapes, declared once: they validate input and the
OpenAPI document is generated from them."""

from __future__ import annotations

from slotward.api.envelope_shapes import GENERIC, SHAPES
from slotward.engine.codes import CODES
from slotward.engine.rules.shapes import Field, Shape
from slotward.engine.tools import COMMIT_HOLD, CREATE_HOLD, RELEASE_HOLD, Tool

__all__ = [
    "ATTENDEE",
    "ATTENDEE_PUT",
    "AUDIT_ENTRY",
    "AUDIT_LIST",
    "AUDIT_VERIFY",
    "AVAILABILITY",
    "COMMIT",
    "CONFLICT",
    "EXECUTION",
    "EXECUTION_ACQUIRE",
    "EXECUTION_ACQUIRED",
    "EXECUTION_COMPLETE",
    "EXECUTION_RESULT",
    "HEALTH",
    "HOLD",
    "HOLD_CREATE",
    "HOLD_LIST",
    "PROBLEM",
    "RELEASE",
    "TOOL_CALL",
    "TOOL_ENVELOPES",
    "WORKFLOW",
]

_WORKFLOW = Field(
    "workflow_id", "string", required=True, min_length=1, max_length=255,
    description="The agent workflow (conversation, task) this call belongs to",
)  # fmt: skip
_STEP = Field(
    "step", "integer", nullable=True, minimum=0, code="invalid_step",
    description="The step within the workflow; a deliberate re-booking uses a new step",
)  # fmt: skip
_IN_PATH = frozenset({"hold_id"})


def _body_of(tool: Tool, name: str) -> Shape:
    """A tool's own endpoint body: its fields less those the path carries."""
    return Shape(name, tuple(f for f in tool.fields if f.name not in _IN_PATH))


# The tool routes' bodies, from the registry (engine/tools.py).
HOLD_CREATE = Shape(
    "HoldCreate",
    (_WORKFLOW, _STEP, *CREATE_HOLD.fields),
    description="Place a hold; exactly one of end, duration_minutes, duration",
)
COMMIT = _body_of(COMMIT_HOLD, "HoldCommit")
RELEASE = _body_of(RELEASE_HOLD, "HoldRelease")
# POST /v1/tool-calls takes any of the envelopes of api/envelope_shapes.py.
TOOL_CALL = GENERIC
TOOL_ENVELOPES = SHAPES

# On an answer that decided on attendees' calendars (DESIGN section 6): when the
# oldest calendar read it used began, and whether a calendar could not be read
# and its last known busy time was used (a binding's ``last_known`` policy).
_EXTERNAL = (
    Field("external_as_of", "string", nullable=True),
    Field("external_stale", "boolean"),
)
HOLD = Shape(
    "Hold",
    (
        Field("id", "string", required=True),
        Field("key", "string", required=True),
        Field("workflow_id", "string", required=True),
        Field("agent_id", "string", required=True),
        Field("attendees", "array", required=True, items=Field("id", "string")),
        Field("start", "string", required=True),
        Field("end", "string", required=True),
        Field("title", "string", required=True),
        Field("description", "string", required=True, nullable=True),
        Field("priority", "integer", required=True),
        Field(
            "status",
            "string",
            required=True,
            enum=("held", "committed", "released", "expired", "preempted"),
        ),
        Field("expires_at", "string", required=True),
        Field("token", "integer", required=True),
        Field("created_at", "string", required=True),
        Field("updated_at", "string", required=True),
        Field("committed_at", "string", required=True, nullable=True),
        Field("preempted_by", "string", required=True, nullable=True),
        Field("audit_seq", "integer", required=True),
        *_EXTERNAL,
    ),
)
HOLD_LIST = Shape(
    "HoldList",
    (
        Field("items", "array", required=True, items=HOLD),
        Field("next_cursor", "string", required=True, nullable=True),
    ),
)
_SLOT = Shape(
    "Slot", (Field("start", "string", required=True), Field("end", "string", required=True))
)
_CONFLICT_ITEM = Shape(
    "ConflictItem",
    (
        Field("attendee", "string", required=True),
        Field("start", "string", required=True),
        Field("end", "string", required=True),
        Field("kind", "string", required=True, enum=("held", "committed", "external")),
        Field("agent", "string"),
        Field("priority", "integer"),
        Field("expires_at", "string"),
        Field("audit_seq", "integer"),
        Field("same_intent", "boolean"),
    ),
)
CONFLICT = Shape(
    "SlotConflict",
    (
        Field("type", "string"),
        Field("title", "string", required=True),
        Field("status", "integer", required=True),
        Field("detail", "string"),
        Field("code", "string", required=True),
        Field("retryable", "boolean", required=True),
        Field("conflicts", "array", required=True, items=_CONFLICT_ITEM),
        Field("alternatives", "array", required=True, max_items=3, items=_SLOT),
        *_EXTERNAL,
    ),
    additional=True,
)
_BUSY = Shape(
    "Busy",
    (
        Field("attendee", "string", required=True),
        Field("start", "string", required=True),
        Field("end", "string", required=True),
        Field("kind", "string", required=True),
    ),
)
AVAILABILITY = Shape(
    "Availability",
    (
        Field("attendees", "array", required=True, items=Field("id", "string")),
        Field("from", "string", required=True),
        Field("to", "string", required=True),
        Field("busy", "array", required=True, items=_BUSY),
        Field("free", "array", required=True, items=_SLOT),
        Field("slots", "array", items=_SLOT),
        *_EXTERNAL,
    ),
)
AUDIT_ENTRY = Shape(
    "AuditEntry",
    (
        Field("seq", "integer", required=True),
        Field("at", "string", required=True),
        Field("actor", "string", required=True),
        Field("action", "string", required=True),
        Field("key", "string", required=True, nullable=True),
        Field("hold_id", "string", required=True, nullable=True),
        Field("outcome", "string", required=True),
        Field("prev_hash", "string", required=True),
        Field("hash", "string", required=True),
    ),
)
AUDIT_LIST = Shape(
    "AuditList",
    (
        Field("items", "array", required=True, items=AUDIT_ENTRY),
        Field("next_cursor", "string", required=True, nullable=True),
    ),
)
AUDIT_VERIFY = Shape(
    "AuditVerify",
    (
        Field("ok", "boolean", required=True),
        Field("count", "integer", required=True),
        Field("head", "string", required=True),
        Field("broken_at", "integer"),
        Field(
            "reason",
            "string",
            enum=("link", "hash", "unkeyed", "no_key", "head", "checkpoint"),
        ),
        Field("keyed", "boolean", description="checked under the server's audit key"),
        Field("keyed_from", "integer", nullable=True, description="the first keyed seq"),
        Field("checkpoint", "string", enum=("ok", "failed")),
    ),
)
ATTENDEE_PUT = Shape(
    "AttendeePut",
    (
        Field(
            "id", "string", min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]*$"
        ),
        Field("name", "string", nullable=True, max_length=200),
        Field(
            "emails",
            "array",
            required=True,
            min_items=1,
            max_items=50,
            items=Field("email", "string", min_length=3, max_length=320),
        ),
    ),
    description="Create or update an attendee and its email aliases",
)
ATTENDEE = Shape(
    "Attendee",
    (
        Field("id", "string", required=True),
        Field("name", "string", required=True, nullable=True),
        Field("emails", "array", required=True, items=Field("email", "string")),
    ),
)
HEALTH = Shape(
    "Health",
    (Field("status", "string", required=True), Field("process", "integer", required=True)),
)

EXECUTION_ACQUIRE = Shape(
    "ExecutionAcquire",
    (
        Field(
            "workflow_id", "string", min_length=1, max_length=255,
            description="Required unless the call carries its own Idempotency-Key",
        ),
        _STEP,
        Field("tool", "string", required=True, min_length=1, max_length=128),
        Field(
            "arguments", "object", required=True,
            description="Identity: objects are canonicalized, arrays keep their order",
        ),
        Field("lease_seconds", "integer", minimum=1, maximum=300, description="Default 30"),
        Field(
            "wait_ms", "integer", minimum=0, maximum=30000,
            description="While another caller holds the lease, wait this long for its result",
        ),
    ),
    description="Acquire the right to run a tool call once, or get its first result",
)  # fmt: skip
EXECUTION_COMPLETE = Shape(
    "ExecutionComplete",
    (
        Field("lease_token", "string", required=True, min_length=1, max_length=64),
        Field(
            "outcome", "string", required=True,
            enum=("succeeded", "failed_terminal", "failed_retryable"),
        ),
        Field("result", "any", description="Any JSON value; replayed to every duplicate"),
    ),
)  # fmt: skip
_EXEC_STATE = ("executing", "succeeded", "failed_terminal")
EXECUTION_ACQUIRED = Shape(
    "ExecutionAcquired",
    (
        Field("key", "string", required=True),
        Field("state", "string", required=True, enum=("acquired",)),
        Field("lease_token", "string", required=True),
        Field("lease_expires_at", "string", required=True),
    ),
)
EXECUTION_RESULT = Shape(
    "ExecutionResult",
    (
        Field("key", "string", required=True),
        Field(
            "state",
            "string",
            required=True,
            enum=("succeeded", "failed_terminal", "failed_retryable"),
        ),
        Field("result", "any", required=True),
    ),
)
EXECUTION = Shape(
    "Execution",
    (
        Field("key", "string", required=True),
        Field("state", "string", required=True, enum=_EXEC_STATE),
        Field("kind", "string", required=True, enum=("execution", "hold")),
        Field("workflow_id", "string", required=True, nullable=True),
        Field("tool", "string", required=True, nullable=True),
        Field("agent_id", "string", required=True, nullable=True),
        Field("created_at", "string", required=True),
        Field("expires_at", "string", required=True, description="End of retention"),
        Field("lease_expires_at", "string", required=True, nullable=True),
        Field("completed_at", "string", required=True, nullable=True),
        Field("result", "any", description="Present once completed"),
    ),
)
WORKFLOW = Shape(
    "Workflow",
    (
        Field("workflow_id", "string", required=True),
        Field("holds", "array", required=True, items=HOLD),
        Field("executions", "array", required=True, items=EXECUTION),
        Field("replays", "integer", required=True),
        Field("last_activity_at", "string", required=True, nullable=True),
        Field("retry_storm_at", "string", required=True, nullable=True),
        Field("retry_storms", "integer", required=True),
    ),
)


PROBLEM = Shape(
    name="Problem",
    description="An error, as RFC 9457 problem details (application/problem+json).",
    additional=True,
    fields=(
        Field("type", "string", description="A URI reference naming the problem type."),
        Field("title", "string", required=True, description="Short summary of the type."),
        Field("status", "integer", required=True, minimum=100, maximum=599),
        Field("detail", "string", description="What went wrong with this request."),
        Field(
            "code",
            "string",
            required=True,
            enum=tuple(CODES),
            description="Stable code clients switch on.",
        ),
        Field(
            "retryable", "boolean", required=True, description="May the same call succeed later?"
        ),
    ),
)
"""RFC 9457 problem+json; other members (``conflicts``, ``field`` ...) may follow."""
