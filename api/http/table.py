"""Every operation of the HTTP API, in one table."""

from __future__ import annotations

from slotward.api.http import approval_schemas as a
from slotward.api.http import calendar_schemas as c
from slotward.api.http import schemas as s
from slotward.api.http import tool_schemas as t
from slotward.api.http import webhook_schemas as w
from slotward.api.http.approval_handlers import (
    create_approval,
    decide_approval,
    get_approval_policy,
    list_approvals,
    put_approval_policy,
    read_approval,
)
from slotward.api.http.calendar_handlers import delete_calendar, put_calendar, read_calendar
from slotward.api.http.execution_handlers import (
    acquire_execution,
    complete_execution,
    read_execution,
)
from slotward.api.http.hold_handlers import (
    commit_hold,
    create_hold,
    list_holds_handler,
    read_hold,
    release_hold,
)
from slotward.api.http.other_handlers import (
    audit_handler,
    audit_verify_handler,
    availability_handler,
    health_handler,
    openapi_handler,
    put_attendee_handler,
)
from slotward.api.http.routes import Param, Route
from slotward.api.http.telemetry import metrics_handler
from slotward.api.http.tool_handlers import tool_call, tools_handler
from slotward.api.http.webhook_handlers import (
    create_webhook,
    delete_webhook,
    enable_webhook,
    list_events,
    list_webhooks,
    read_event,
    read_webhook,
    redrive_event,
    rotate_webhook,
)
from slotward.api.http.workflow_handlers import workflow_handler
from slotward.api.tool_formats import DEFAULT_FORMAT, FORMATS
from slotward.api.tool_results import REPLIES
from slotward.engine.rules.shapes import Field
from slotward.engine.tools import CREATE_HOLD, FIND_FREE_SLOTS, TOOLS

__all__ = ["ROUTES"]

_ID = Param("hold_id", "path", required=True)
_APPROVAL = Param("approval_id", "path", required=True)
_KEY = Param("key", "path", required=True, description="The key as answered in Idempotency-Key")
_WRITE = {409: s.CONFLICT, 422: None, 401: None, 403: None}
_WEBHOOK = Param("webhook_id", "path", required=True)
_EVENT = Param("event_id", "path", required=True)
_ADMIN = {401: None, 403: None}
_ATTENDEE = Param("attendee", "path", required=True, description="An attendee id or an email")
_CURSOR = Param("cursor", description="the next_cursor of the previous page")
# GET /v1/availability takes find_free_slots' arguments as its query; without a
# duration it answers only the busy intervals and free gaps.
_AVAILABILITY = tuple(
    Param(
        f.name,
        required=f.required and f.name != "duration_minutes",
        repeatable=f.type == "array",
        description="comma-separated ids or emails (the parameter may repeat)"
        if f.type == "array"
        else "",
    )
    for f in FIND_FREE_SLOTS.fields
)

_REPLY = Param(
    "reply", schema=Field("reply", "string", enum=REPLIES),
    description="Answer with the tool-result message(s) to hand back to the model; "
    "each call then needs its id",
)  # fmt: skip
_FORMAT = Param(
    "format", schema=Field("format", "string", enum=FORMATS),
    description=f"The model API's format (default {DEFAULT_FORMAT})",
)  # fmt: skip

ROUTES: tuple[Route, ...] = (
    Route(
        "POST", "/v1/holds", create_hold, "createHold", f"Place a hold ({CREATE_HOLD.name})",
        request=s.HOLD_CREATE, responses={201: s.HOLD, **_WRITE}, mutating=True,
    ),
    Route(
        "GET", "/v1/holds", list_holds_handler, "listHolds", "List holds",
        responses={200: s.HOLD_LIST},
        params=(
            Param("workflow_id"), Param("status", description="comma-separated"),
            Param("attendee"), Param("cursor"),
            Param("limit", schema=Field("limit", "integer", minimum=1, maximum=200)),
        ),
    ),
    Route(
        "GET", "/v1/holds/{hold_id}", read_hold, "getHold", "Read a hold",
        responses={200: s.HOLD, 404: None}, params=(_ID,),
    ),
    Route(
        "POST", "/v1/holds/{hold_id}/commit", commit_hold, "commitHold", "Commit a hold",
        request=s.COMMIT,
        responses={200: s.HOLD, 202: a.APPROVAL_REQUIRED, 404: None, **_WRITE}, params=(_ID,),
        mutating=True,
    ),
    Route(
        "POST", "/v1/holds/{hold_id}/release", release_hold, "releaseHold",
        "Release a hold (the compensating action)",
        request=s.RELEASE, responses={200: s.HOLD, 404: None, 401: None, 403: None},
        params=(_ID,), mutating=True, body_optional=True,
    ),
    Route(
        "GET", "/v1/availability", availability_handler, "getAvailability",
        "Busy intervals, free gaps and free slots", responses={200: s.AVAILABILITY},
        params=_AVAILABILITY,
    ),
    Route(
        "POST", "/v1/tool-calls", tool_call, "toolCall",
        "Call a tool in the envelope the model emitted (slotward's, an OpenAI tool call, an "
        "Anthropic tool_use block), or run an assistant message's calls in order",
        request=s.TOOL_ENVELOPES,
        responses={
            200: (s.HOLD, s.AVAILABILITY, t.TOOL_BATCH, *t.TOOL_REPLIES), 201: s.HOLD,
            202: a.APPROVAL_REQUIRED, **_WRITE,
        },
        params=(_REPLY,), mutating=True,
        sometimes_read_only=any(tool.read_only for tool in TOOLS), tag="tools",
    ),
    Route(
        "GET", "/v1/tools", tools_handler, "listTools",
        "The tools' schemas, ready to register with a model",
        responses={200: t.TOOL_LIST, 422: None, 401: None}, params=(_FORMAT,), tag="tools",
    ),
    Route(
        "POST", "/v1/executions", acquire_execution, "acquireExecution",
        "Acquire the lease to run a tool call once, or get its first result",
        request=s.EXECUTION_ACQUIRE,
        responses={
            201: s.EXECUTION_ACQUIRED, 200: s.EXECUTION_RESULT, 409: None, 422: None,
            401: None, 403: None,
        },
        mutating=True, tag="executions",
    ),
    Route(
        "POST", "/v1/executions/{key}/complete", complete_execution, "completeExecution",
        "Report the outcome of an acquired execution (fenced by its lease token)",
        request=s.EXECUTION_COMPLETE,
        responses={
            200: s.EXECUTION_RESULT, 404: None, 409: None, 422: None, 401: None, 403: None
        },
        params=(_KEY,), mutating=True, client_key=False, tag="executions",
    ),
    Route(
        "GET", "/v1/executions/{key}", read_execution, "getExecution", "Read an execution record",
        responses={200: s.EXECUTION, 404: None}, params=(_KEY,), tag="executions",
    ),
    Route(
        "POST", "/v1/approvals", create_approval, "createApproval",
        "Ask a person to approve something (a hold's commit, or any action of the agent's)",
        request=a.APPROVAL_CREATE,
        responses={201: a.APPROVAL, 404: None, 409: None, 422: None, 401: None, 403: None},
        mutating=True, tag="approvals",
    ),
    Route(
        "GET", "/v1/approvals", list_approvals, "listApprovals",
        "The tenant's approvals, oldest first (the queue: ?status=pending)",
        responses={200: a.APPROVAL_LIST, 422: None},
        params=(
            Param("status", description="comma-separated: pending, approved, denied, expired"),
            _CURSOR, Param("limit", schema=Field("limit", "integer", minimum=1, maximum=200)),
        ),
        tag="approvals",
    ),
    Route(
        "GET", "/v1/approvals/{approval_id}", read_approval, "getApproval",
        "Read an approval; ?wait=N holds the answer up to N seconds for a decision",
        responses={200: a.APPROVAL, 404: None, 422: None},
        params=(
            _APPROVAL,
            Param("wait", schema=Field("wait", "integer", minimum=0, maximum=60),
                  description="seconds to wait while it is pending (long poll)"),
        ),
        tag="approvals",
    ),
    Route(
        "POST", "/v1/approvals/{approval_id}/decision", decide_approval, "decideApproval",
        "Approve or deny (a reviewer or an admin, never the asking agent); recorded once",
        request=a.APPROVAL_DECISION,
        responses={200: a.APPROVAL, 404: None, 409: None, 422: None, 401: None, 403: None},
        params=(_APPROVAL,), mutating=True, client_key=False, tag="approvals",
    ),
    Route(
        "PUT", "/v1/approval-policy", put_approval_policy, "putApprovalPolicy",
        "Which commits wait for a person's approval (admin)",
        request=a.APPROVAL_POLICY_PUT, responses={200: a.APPROVAL_POLICY, 422: None, **_ADMIN},
        tag="approvals",
    ),
    Route(
        "GET", "/v1/approval-policy", get_approval_policy, "getApprovalPolicy",
        "The tenant's approval policy", responses={200: a.APPROVAL_POLICY}, tag="approvals",
    ),
    Route(
        "GET", "/v1/workflows/{workflow_id}", workflow_handler, "getWorkflow",
        "A workflow's holds, executions, replay count and last activity",
        responses={200: s.WORKFLOW, 404: None},
        params=(Param("workflow_id", "path", required=True),), tag="workflows",
    ),
    Route(
        "POST", "/v1/attendees", put_attendee_handler, "putAttendee",
        "Create or update an attendee and its email aliases (admin)",
        request=s.ATTENDEE_PUT, responses={200: s.ATTENDEE, 409: None}, tag="directory",
    ),
    Route(
        "PUT", "/v1/attendees/{attendee}/calendar", put_calendar, "putCalendar",
        "Bind an attendee to a calendar, replacing its binding, and read it once (admin); "
        "the password is stored sealed and never answered",
        request=c.CALENDAR_PUT, responses={200: c.CALENDAR, 422: None, **_ADMIN},
        params=(_ATTENDEE,), tag="calendars",
    ),
    Route(
        "GET", "/v1/attendees/{attendee}/calendar", read_calendar, "getCalendar",
        "An attendee's calendar binding and its sync state (admin)",
        responses={200: c.CALENDAR, 404: None, 422: None, **_ADMIN}, params=(_ATTENDEE,),
        tag="calendars",
    ),
    Route(
        "DELETE", "/v1/attendees/{attendee}/calendar", delete_calendar, "deleteCalendar",
        "Unbind an attendee's calendar: its mirror and unwritten events go (admin)",
        responses={204: None, 404: None, 422: None, **_ADMIN}, params=(_ATTENDEE,),
        tag="calendars",
    ),
    Route(
        "GET", "/v1/audit", audit_handler, "listAudit", "The tenant's audit log",
        responses={200: s.AUDIT_LIST}, params=(Param("cursor"), Param("limit")), tag="audit",
    ),
    Route(
        "GET", "/v1/audit/verify", audit_verify_handler, "verifyAudit",
        "Recompute the tenant's hash chain", responses={200: s.AUDIT_VERIFY, 422: None},
        params=(
            Param(
                "checkpoint",
                description="a signed head from `slotward audit checkpoint`: the chain "
                "must still hold its entry (catches a deleted tail)",
            ),
        ),
        tag="audit",
    ),
    Route(
        "POST", "/v1/webhooks", create_webhook, "createWebhook",
        "Subscribe a URL to the tenant's events (admin); the answer shows the secret once",
        request=w.WEBHOOK_CREATE, responses={201: w.WEBHOOK_CREATED, 422: None, **_ADMIN},
        tag="webhooks",
    ),
    Route(
        "GET", "/v1/webhooks", list_webhooks, "listWebhooks",
        "The tenant's webhook subscriptions, never a secret (admin)",
        responses={200: w.WEBHOOK_LIST, **_ADMIN},
        params=(_CURSOR, Param("limit", schema=Field("limit", "integer", minimum=1, maximum=200))),
        tag="webhooks",
    ),
    Route(
        "GET", "/v1/webhooks/{webhook_id}", read_webhook, "getWebhook",
        "Read a webhook subscription (admin)",
        responses={200: w.WEBHOOK, 404: None, **_ADMIN}, params=(_WEBHOOK,), tag="webhooks",
    ),
    Route(
        "POST", "/v1/webhooks/{webhook_id}/rotate", rotate_webhook, "rotateWebhook",
        "A new signing secret, shown once; the old one signs beside it for overlap_hours (admin)",
        request=w.WEBHOOK_ROTATE,
        responses={200: w.WEBHOOK_CREATED, 404: None, 422: None, **_ADMIN},
        params=(_WEBHOOK,), body_optional=True, tag="webhooks",
    ),
    Route(
        "POST", "/v1/webhooks/{webhook_id}/enable", enable_webhook, "enableWebhook",
        "Make a disabled subscription active again, its failures forgotten (admin); "
        "re-drive its dead events after",
        request=w.WEBHOOK_ENABLE,
        responses={200: w.WEBHOOK, 404: None, 422: None, **_ADMIN},
        params=(_WEBHOOK,), body_optional=True, tag="webhooks",
    ),
    Route(
        "DELETE", "/v1/webhooks/{webhook_id}", delete_webhook, "deleteWebhook",
        "Delete a webhook subscription and its undelivered deliveries (admin)",
        responses={204: None, 404: None, **_ADMIN}, params=(_WEBHOOK,), tag="webhooks",
    ),
    Route(
        "GET", "/v1/outbox", list_events, "listOutbox",
        "The tenant's outbox events with their deliveries and attempts (admin)",
        responses={200: w.OUTBOX_LIST, 422: None, **_ADMIN},
        params=(
            Param("state", schema=Field("state", "string", enum=("pending", "delivered", "dead"))),
            _CURSOR, Param("limit", schema=Field("limit", "integer", minimum=1, maximum=100)),
        ),
        tag="webhooks",
    ),
    Route(
        "GET", "/v1/outbox/{event_id}", read_event, "getOutboxEvent",
        "Read an outbox event, its deliveries and their attempts (admin)",
        responses={200: w.OUTBOX_EVENT, 404: None, **_ADMIN}, params=(_EVENT,), tag="webhooks",
    ),
    Route(
        "POST", "/v1/outbox/{event_id}/redrive", redrive_event, "redriveOutboxEvent",
        "Send an event's dead deliveries again from the first attempt (admin)",
        responses={200: w.OUTBOX_EVENT, 404: None, 409: None, **_ADMIN}, params=(_EVENT,),
        tag="webhooks",
    ),
    Route(
        "GET", "/healthz", health_handler, "health", "Liveness", responses={200: s.HEALTH},
        auth=False, tag="ops",
    ),
    Route(
        "GET", "/metrics", metrics_handler, "metrics",
        "Prometheus metrics of this process (no tenant data)", responses={200: None},
        auth=False, tag="ops",
    ),
    Route(
        "GET", "/openapi.json", openapi_handler, "openapi", "This document",
        responses={200: None}, auth=False, tag="ops",
    ),
)  # fmt: skip
