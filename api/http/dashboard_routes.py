"""The dashboard's operations: its session, its reads, its live stream and its files.

Part of the one route table (api/http/table.py ``ROUTES``, which lists these
among the others), kept apart so each module stays readable.
"""

from __future__ import annotations

from slotward.api.http import dashboard_schemas as d
from slotward.api.http.dashboard_handlers import timeline_handler, workflows_handler
from slotward.api.http.routes import Param, Route
from slotward.api.http.session_handlers import read_session, sign_in, sign_out
from slotward.api.http.static_handlers import WEB_NAME, WEB_TYPES, dashboard_file, dashboard_index
from slotward.api.http.stream_handlers import EVENT_STREAM, audit_stream
from slotward.engine.rules.shapes import Field

__all__ = ["DASHBOARD_ROUTES"]

_ATTENDEE_ROWS = Param(
    "attendee", repeatable=True,
    description="Attendees whose rows must be there, holds or not: comma-separated ids or "
    "emails (the parameter may repeat)",
)  # fmt: skip

DASHBOARD_ROUTES: tuple[Route, ...] = (
    Route(
        "GET", "/v1/audit/stream", audit_stream, "streamAudit",
        "The tenant's audit entries as server-sent events (event 'audit', id the seq), live: "
        "after Last-Event-ID, else ?after, else from now",
        responses={200: None, 422: None},
        params=(
            Param("after", schema=Field("after", "integer", minimum=0, maximum=2**53 - 1),
                  description="Start after this seq (0: from the first entry)"),
            Param("Last-Event-ID", "header", description="What EventSource sends when it "
                  "reconnects: the seq of the last event it had (wins over ?after)"),
        ),
        media=(EVENT_STREAM,), tag="audit",
    ),
    Route(
        "GET", "/v1/timeline", timeline_handler, "getTimeline",
        "The holds of any status and the external busy time of a window (at most 14 days), "
        "one row per attendee",
        responses={200: d.TIMELINE, 422: None},
        params=(
            Param("from", required=True), Param("to", required=True),
            Param("timezone", description="an IANA zone for wall times without an offset"),
            _ATTENDEE_ROWS,
        ),
        tag="dashboard",
    ),
    Route(
        "GET", "/v1/workflows", workflows_handler, "listWorkflows",
        "The tenant's workflows with the most replays first, with their retry storms",
        responses={200: d.WORKFLOW_LIST, 422: None},
        params=(Param("limit", schema=Field("limit", "integer", minimum=1, maximum=200)),),
        tag="workflows",
    ),
    Route(
        "POST", "/v1/session", sign_in, "signIn",
        "Sign in to the dashboard with a reviewer's or an admin's key: the answer sets an "
        "HttpOnly session cookie and tells the CSRF token",
        request=d.SESSION_SIGN_IN, responses={201: d.SESSION, 401: None, 403: None, 422: None},
        auth=False, tag="dashboard",
    ),
    Route(
        "GET", "/v1/session", read_session, "getSession",
        "The dashboard session of the cookie, with its CSRF token",
        responses={200: d.SESSION, 401: None}, auth=False, tag="dashboard",
    ),
    Route(
        "DELETE", "/v1/session", sign_out, "signOut",
        "Sign out of the dashboard (X-CSRF-Token): the session ends, the cookie is cleared",
        responses={204: None, 403: None}, auth=False, tag="dashboard",
    ),
    Route(
        "GET", "/dashboard", dashboard_index, "dashboard",
        "The dashboard: a page for reviewers and admins (sign in with a key)",
        responses={200: None}, auth=False, media=(WEB_TYPES[".html"],), tag="dashboard",
    ),
    Route(
        "GET", "/dashboard/{name}", dashboard_file, "dashboardFile",
        "A file of the dashboard's page (its script, its styles)",
        responses={200: None, 404: None},
        params=(Param("name", "path", required=True, schema=Field(
            "name", "string", pattern=WEB_NAME, description="a file of the page, by name",
        )),),
        auth=False, media=tuple(sorted(set(WEB_TYPES.values()))), tag="dashboard",
    ),
)  # fmt: skip
