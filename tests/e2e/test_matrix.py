"""Who may call what: the role matrix and tenant isolation, over every route.

The matrix is written here by hand from DESIGN section 7, not read from the
code, so a handler that forgets its role check (or checks the wrong one)
fails. Every route of the table must appear in it.
"""

from __future__ import annotations

from typing import Any

import pytest

from slotward.api.http.routes import Route
from slotward.api.http.table import ROUTES
from tests.e2e.conftest import HOLD_BODY, Answer, Client, Server

ALL = frozenset({"agent", "reviewer", "admin"})
WRITERS = frozenset({"agent", "admin"})
ADMIN = frozenset({"admin"})
REVIEWERS = frozenset({"reviewer", "admin"})
ALLOWED: dict[tuple[str, str], frozenset[str]] = {
    ("POST", "/v1/holds"): WRITERS,
    ("GET", "/v1/holds"): ALL,
    ("GET", "/v1/holds/{hold_id}"): ALL,
    ("POST", "/v1/holds/{hold_id}/commit"): WRITERS,
    ("POST", "/v1/holds/{hold_id}/release"): WRITERS,
    ("GET", "/v1/availability"): ALL,
    ("POST", "/v1/tool-calls"): WRITERS,  # with a tool that writes (find_free_slots: ALL)
    ("GET", "/v1/tools"): ALL,
    ("POST", "/v1/executions"): WRITERS,
    ("POST", "/v1/executions/{key}/complete"): WRITERS,
    ("GET", "/v1/executions/{key}"): ALL,
    ("GET", "/v1/workflows/{workflow_id}"): ALL,
    ("POST", "/v1/attendees"): ADMIN,
    ("GET", "/v1/audit"): ALL,
    ("GET", "/v1/audit/verify"): ALL,
    ("GET", "/v1/audit/stream"): ALL,
    ("GET", "/v1/timeline"): ALL,
    ("GET", "/v1/workflows"): ALL,
    ("POST", "/v1/webhooks"): ADMIN,
    ("GET", "/v1/webhooks"): ADMIN,
    ("GET", "/v1/webhooks/{webhook_id}"): ADMIN,
    ("POST", "/v1/webhooks/{webhook_id}/rotate"): ADMIN,
    ("POST", "/v1/webhooks/{webhook_id}/enable"): ADMIN,
    ("DELETE", "/v1/webhooks/{webhook_id}"): ADMIN,
    ("GET", "/v1/outbox"): ADMIN,
    ("GET", "/v1/outbox/{event_id}"): ADMIN,
    ("POST", "/v1/outbox/{event_id}/redrive"): ADMIN,
    ("PUT", "/v1/attendees/{attendee}/calendar"): ADMIN,
    ("GET", "/v1/attendees/{attendee}/calendar"): ADMIN,
    ("DELETE", "/v1/attendees/{attendee}/calendar"): ADMIN,
    ("POST", "/v1/approvals"): WRITERS,
    ("GET", "/v1/approvals"): ALL,
    ("GET", "/v1/approvals/{approval_id}"): ALL,
    ("POST", "/v1/approvals/{approval_id}/decision"): REVIEWERS,
    ("PUT", "/v1/approval-policy"): ADMIN,
    ("GET", "/v1/approval-policy"): ALL,
}
AUTHENTICATED = [r for r in ROUTES if r.auth]
# Allowed by role, then refused for another documented reason: the caller is
# not the hold's owner, or holds no lease (the test's objects are the owner's).
PAST_THE_ROLE_CHECK: dict[tuple[str, str], dict[str, str]] = {
    ("POST", "/v1/holds/{hold_id}/commit"): {"agent": "not_hold_owner", "admin": "not_hold_owner"},
    ("POST", "/v1/holds/{hold_id}/release"): {"agent": "not_hold_owner"},
    ("POST", "/v1/executions/{key}/complete"): {"agent": "lease_lost", "admin": "lease_lost"},
    # The hold's events were delivered to nobody: nothing is dead.
    ("POST", "/v1/outbox/{event_id}/redrive"): {"admin": "nothing_to_redrive"},
}
# No receiver listens there: the relay is off in these servers, and the
# address is only stored (a loopback address, hence allow_private_urls).
WEBHOOK = {"url": "http://127.0.0.1:9/in", "topics": ["hold.*"]}
# A CalDAV calendar where nothing listens, as WEBHOOK: the binding is stored and
# its one read fails at once (status "error"), which a PUT still answers 200.
# It fails closed: a claim on its attendee would be 503 provider_unavailable.
CALENDAR = {"provider": "caldav", "url": "http://127.0.0.1:9/dav/alex/"}
# Attendees are names within a tenant: a stranger's PUT binds an attendee of its
# own tenant that has the same name, which is no leak (checked below), not a 404.
BINDS_ITS_OWN = {("PUT", "/v1/attendees/{attendee}/calendar")}
APPROVAL = {"workflow_id": "wf-matrix", "summary": "Refund order 1", "evidence": {"order": 1}}


@pytest.fixture
def config_overrides() -> dict[str, Any]:
    """Webhook secrets need the server's secret key."""
    return {"secret_key": "matrix-secret-key-0123456789", "allow_private_urls": True}


def test_the_matrix_covers_every_route() -> None:
    assert {(r.method, r.path) for r in AUTHENTICATED} == set(ALLOWED)


async def _objects(server: Server) -> dict[str, str]:
    """A hold, an execution and a workflow of tenant acme, made by its agent; a
    webhook subscription, the hold's outbox event and its attendee's calendar
    binding, by its admin."""
    owner = await server.key(agent="owner")
    hold = await owner.create(dict(HOLD_BODY))
    assert hold.status == 201
    body = {"workflow_id": HOLD_BODY["workflow_id"], "tool": "t", "arguments": {}}
    execution = await owner.post("/v1/executions", body)
    assert execution.status == 201
    admin = await server.key(agent="owner-admin", role="admin")
    webhook = await admin.post("/v1/webhooks", WEBHOOK)
    assert webhook.status == 201, webhook.body[:300]
    events = await admin.get("/v1/outbox")
    [event] = [e for e in events.json["items"] if e["hold_id"] == hold.json["id"]]
    approval = await owner.post("/v1/approvals", APPROVAL)
    assert approval.status == 201, approval.body[:300]
    attendee = "room-matrix"  # booked by no call here: its failing calendar blocks none
    bound = await admin.request("PUT", f"/v1/attendees/{attendee}/calendar", CALENDAR)
    assert bound.status == 200, bound.body[:300]
    return {
        "attendee": attendee,
        "hold_id": hold.json["id"],
        "key": execution.json["key"],
        "workflow_id": HOLD_BODY["workflow_id"],
        "webhook_id": webhook.json["id"],
        "event_id": event["id"],
        "approval_id": approval.json["id"],
    }


def _call(method: str, path: str, ids: dict[str, str]) -> tuple[str, Any]:
    """A concrete path and a body that would pass validation for ``path``."""
    concrete = path.format(**ids)
    bodies: dict[str, Any] = {
        "/v1/holds": {**HOLD_BODY, "workflow_id": "wf-matrix", "start": "2030-10-20T10:00:00Z"},
        "/v1/holds/{hold_id}/commit": {"token": 1},
        "/v1/holds/{hold_id}/release": {},
        "/v1/tool-calls": {
            "workflow_id": "wf-matrix", "tool": "create_calendar_hold",
            "arguments": {"attendees": ["x@example.com"], "start": "2030-10-21T10:00:00Z",
                          "duration_minutes": 30},
        },
        "/v1/executions": {"workflow_id": "wf-matrix", "tool": "t", "arguments": {"n": 1}},
        "/v1/executions/{key}/complete": {"lease_token": "lease_x", "outcome": "succeeded"},
        "/v1/attendees": {"emails": ["matrix@example.com"]},
        "/v1/webhooks": WEBHOOK,
        "/v1/webhooks/{webhook_id}/rotate": {},
        "/v1/webhooks/{webhook_id}/enable": {},
        "/v1/outbox/{event_id}/redrive": {},
        "/v1/attendees/{attendee}/calendar": CALENDAR,
        "/v1/approvals": {**APPROVAL, "step": 2},
        "/v1/approvals/{approval_id}/decision": {"decision": "approve"},
        "/v1/approval-policy": {"require_approval": {}},
    }  # fmt: skip
    if path == "/v1/availability":
        concrete += "?attendees=alex@example.com&from=2030-10-14T00:00:00Z&to=2030-10-15T00:00:00Z"
    if path == "/v1/timeline":
        concrete += "?from=2030-10-14T00:00:00Z&to=2030-10-15T00:00:00Z"
    return concrete, bodies.get(path) if method in ("POST", "PUT") else None


@pytest.mark.parametrize("role", sorted(ALL))
@pytest.mark.parametrize("route", AUTHENTICATED, ids=lambda r: f"{r.method} {r.path}")
async def test_every_role_on_every_route(server: Server, route: Any, role: str) -> None:
    ids = await _objects(server)
    client = await server.key(agent=f"caller-{role}", role=role)  # type: ignore[arg-type]
    path, body = _call(route.method, route.path, ids)
    answer = await _ask(client, route, path, body)
    allowed = role in ALLOWED[(route.method, route.path)]
    refused = answer.status == 403 and answer.json.get("code") == "role_forbidden"
    assert refused == (not allowed), (answer.status, answer.body[:300])
    later = PAST_THE_ROLE_CHECK.get((route.method, route.path), {}).get(role)
    if not allowed:
        return
    if later is None:  # allowed means answered
        assert 200 <= answer.status < 300, (answer.status, answer.body[:300])
    else:
        assert answer.json.get("code") == later, (answer.status, answer.body[:300])


async def test_a_reviewer_may_still_find_free_slots_through_a_tool_call(server: Server) -> None:
    reviewer = await server.key(agent="rev", role="reviewer")
    call = {
        "tool": "find_free_slots",
        "arguments": {"attendees": ["alex@example.com"], "from": "2030-10-14T09:00:00Z",
                      "to": "2030-10-14T17:00:00Z", "duration_minutes": 30},
    }  # fmt: skip
    answer = await reviewer.post("/v1/tool-calls", call)
    assert answer.status == 200


async def _ask(client: Client, route: Route, path: str, body: Any) -> Answer:
    """The route's answer; of an event stream, its head (the stream stays open)."""
    if route.streams:
        return await client.open_stream(path)
    return await client.request(route.method, path, body)


@pytest.mark.parametrize(
    "route", [r for r in AUTHENTICATED if "{" in r.path], ids=lambda r: f"{r.method} {r.path}"
)
async def test_another_tenants_ids_answer_404_on_every_route(server: Server, route: Any) -> None:
    ids = await _objects(server)
    stranger: Client = await server.key(tenant="globex", agent="intruder", role="admin")
    before = server.table_counts()
    path, body = _call(route.method, route.path, ids)
    answer = await stranger.request(route.method, path, body)
    if (route.method, route.path) in BINDS_ITS_OWN:
        assert answer.status == 200, answer.body[:300]
        tenants = server.sql("SELECT tenant FROM calendar_bindings ORDER BY tenant")
        assert tenants == [("acme",), ("globex",)]  # acme's binding is left as it was
        return
    assert answer.status == 404, answer.body[:300]
    after = server.table_counts()
    assert after == before  # nothing written for a refused stranger


# Values for every query parameter of every list route, aimed at the other
# tenant's data. A new parameter fails the test until it is given one here.
def _aimed_at(owner: dict[str, str]) -> dict[str, list[str]]:
    return {
        "workflow_id": [owner["workflow_id"]],
        "status": ["held,committed,released,expired,preempted", "pending,approved,denied,expired"],
        "attendee": [owner["email"]],
        "attendees": [owner["email"]],
        "cursor": [
            owner["holds_cursor"],
            owner["audit_cursor"],
            owner["approvals_cursor"],
            "0",
            "1",
        ],
        "limit": ["1", "200"],
        "from": ["2030-10-01T00:00:00Z"],
        "to": ["2030-10-30T00:00:00Z"],
        "timezone": ["UTC"],
        "state": ["pending", "delivered", "dead"],
        "duration_minutes": ["30"],
        "format": ["openai", "anthropic", "mcp"],  # the tools: the same for every tenant
        "after": ["0"],  # the stream's: its own test reads it (tests/e2e/test_dashboard_stream.py)
        "checkpoint": ["swcp1.e30.AAAA"],  # tests/e2e/test_audit_tamper.py aims real ones
    }


async def test_no_list_parameter_reaches_another_tenant(server: Server) -> None:
    owner = await server.key(tenant="acme", agent="owner")
    secrets: set[str] = set()
    for day in (14, 15):  # two holds, so a list of one has a next cursor
        body = {**HOLD_BODY, "attendees": ["only-acme@example.com"],
                "title": f"acme secret {day}", "start": f"2030-10-{day}T14:00:00Z"}  # fmt: skip
        made = await owner.create(body)
        assert made.status == 201
        secrets |= {made.json["id"], made.headers["Idempotency-Key"], body["title"]}
    admin = await server.key(tenant="acme", agent="owner-admin", role="admin")
    for _ in range(2):  # two, so a list of one has a next cursor
        webhook = (await admin.post("/v1/webhooks", WEBHOOK)).json
        secrets |= {webhook["id"], webhook["secret"]}
    for n in range(2):  # two, so a list of one has a next cursor
        asked_for = {**APPROVAL, "step": n, "summary": f"acme secret approval {n}"}
        made = (await owner.post("/v1/approvals", asked_for)).json
        secrets |= {made["id"], made["key"], f"acme secret approval {n}"}
    holds = (await owner.get("/v1/holds?limit=1")).json
    audit = (await owner.get("/v1/audit?limit=1")).json
    approvals = (await owner.get("/v1/approvals?limit=1")).json
    secrets |= {e["hash"] for e in (await owner.get("/v1/audit")).json["items"]}
    aimed = _aimed_at({
        "workflow_id": HOLD_BODY["workflow_id"], "email": "only-acme@example.com",
        "holds_cursor": holds["next_cursor"], "audit_cursor": audit["next_cursor"],
        "approvals_cursor": approvals["next_cursor"],
    })  # fmt: skip
    # An admin: the strongest stranger, who may call every list (some are admins' only).
    other = await server.key(tenant="globex", agent="other", role="admin")
    # An event stream never ends: tests/e2e/test_dashboard_stream.py shows a stranger's
    # stream has none of another tenant's entries.
    lists = [r for r in AUTHENTICATED if r.method == "GET" and "{" not in r.path and not r.streams]
    asked = 0
    for route in lists:
        base = {p.name: aimed[p.name][0] for p in route.params if p.required}
        for param in route.params:
            assert param.name in aimed, f"give {param.name!r} of {route.path} a value above"
            for value in aimed[param.name]:
                query = "&".join(f"{k}={v}" for k, v in {**base, param.name: value}.items())
                answer = await other.get(f"{route.path}?{query}" if query else route.path)
                assert answer.status in (200, 422), (route.path, query, answer.json)
                leaked = [s for s in secrets if s in answer.body.decode()]
                assert not leaked, (route.path, query, leaked)
                asked += 1
    assert asked >= 20
