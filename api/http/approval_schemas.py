"""Request and response shapes of approvals and the approval policy (docs/approvals.md)."""

from __future__ import annotations

from slotward.api.http.schemas import HOLD
from slotward.engine.approvals import ApprovalStatus
from slotward.engine.rules.approvals import MAX_EXPIRY, MAX_NOTE, MAX_SUMMARY, MIN_EXPIRY
from slotward.engine.rules.fingerprint import MAX_STEP
from slotward.engine.rules.shapes import Field, Shape

__all__ = [
    "APPROVAL",
    "APPROVAL_CREATE",
    "APPROVAL_DECISION",
    "APPROVAL_LIST",
    "APPROVAL_POLICY",
    "APPROVAL_POLICY_PUT",
    "APPROVAL_REQUIRED",
]

_STATUSES = tuple(s.value for s in ApprovalStatus)

APPROVAL_CREATE = Shape(
    "ApprovalCreate",
    (
        Field("workflow_id", "string", min_length=1, max_length=255,
              description="Needed unless an Idempotency-Key is sent or the action is a "
              "hold.commit"),
        Field("step", "integer", nullable=True, minimum=0, maximum=MAX_STEP, code="invalid_step"),
        Field("summary", "string", required=True, min_length=1, max_length=MAX_SUMMARY,
              description="One line for the person who decides"),
        Field("evidence", "any", required=True,
              description="Any JSON, at most 32 KiB as canonical JSON"),
        Field("action", "object", nullable=True,
              description='What it gates: {"type": "hold.commit", "hold_id": ...} gates that '
              "hold's commit; any other type is the agent's own"),
        Field("expires_in_seconds", "integer", minimum=int(MIN_EXPIRY.total_seconds()),
              maximum=int(MAX_EXPIRY.total_seconds()), description="Default 86400 (24 h)"),
    ),
    description="Ask a person; idempotent like every write",
)  # fmt: skip

APPROVAL = Shape(
    "Approval",
    (
        Field("id", "string", required=True),
        Field("key", "string", required=True),
        Field("workflow_id", "string", required=True, nullable=True),
        Field("requested_by", "string", required=True),
        Field("summary", "string", required=True),
        Field("evidence", "any", required=True),
        Field("action", "object", required=True, nullable=True),
        Field("hold_id", "string", required=True, nullable=True),
        Field("status", "string", required=True, enum=_STATUSES),
        Field("created_at", "string", required=True),
        Field("updated_at", "string", required=True),
        Field("expires_at", "string", required=True),
        Field("decided_by", "string", required=True, nullable=True),
        Field("decided_at", "string", required=True, nullable=True),
        Field("note", "string", required=True, nullable=True),
        Field("audit_seq", "integer", required=True),
    ),
)

APPROVAL_LIST = Shape(
    "ApprovalList",
    (
        Field("items", "array", required=True, items=APPROVAL),
        Field("next_cursor", "string", required=True, nullable=True),
    ),
)

APPROVAL_DECISION = Shape(
    "ApprovalDecision",
    (
        Field("decision", "string", required=True, enum=("approve", "deny")),
        Field("note", "string", nullable=True, max_length=MAX_NOTE),
    ),
    description="A reviewer's or an admin's decision, never the asking agent's",
)

APPROVAL_REQUIRED = Shape(
    "ApprovalRequired",
    (
        Field("outcome", "string", required=True, enum=("approval_required",)),
        Field("detail", "string", required=True),
        Field("approval", "object", required=True, shape=APPROVAL),
        Field("hold", "object", required=True, shape=HOLD),
    ),
    description="A commit waiting for a person: send the same commit again once approved",
)

_RULES = Shape(
    "ApprovalRules",
    (
        Field("attendees_more_than", "integer", minimum=0, maximum=100),
        Field("longer_than_minutes", "integer", minimum=0, maximum=1440),
        Field("priority_at_least", "integer", minimum=0, maximum=100),
        Field("outside_domains", "array", max_items=100,
              items=Field("domain", "string", min_length=1, max_length=253)),
    ),
    description="A commit any rule matches waits for an approval; {} requires none",
)  # fmt: skip

APPROVAL_POLICY_PUT = Shape(
    "ApprovalPolicyPut",
    (Field("require_approval", "object", required=True, shape=_RULES),),
)

APPROVAL_POLICY = Shape(
    "ApprovalPolicy",
    (
        Field("require_approval", "object", required=True, shape=_RULES),
        Field("updated_at", "string", required=True, nullable=True),
        Field("updated_by", "string", required=True, nullable=True),
    ),
)
