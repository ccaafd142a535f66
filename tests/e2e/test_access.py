"""Who may do what: API keys, roles, hold ownership and tenant isolation.

DESIGN section 7: every ``/v1`` call needs ``Authorization: Bearer <key>``;
keys carry a tenant, an agent and a role; another tenant's objects answer 404.
Section 5: only the owner commits; the owner or an admin releases. Section 2:
two tenants never block each other.
"""

from __future__ import annotations

import os
import re
from typing import Any

import pytest

from slotward.api.http.routes import Route
from slotward.api.http.table import ROUTES
from tests.e2e.conftest import Answer, Client, Server

NEEDS_KEY = [r for r in ROUTES if r.auth]
# The dashboard's sign-in takes its key in the body; reading and ending the session
# take the cookie it set (tests/e2e/test_dashboard_sessions.py).
SESSION = "/v1/session"
OPEN = [r for r in ROUTES if not r.auth and r.path != SESSION]


def _route_id(route: Route) -> str:
    return f"{route.method} {route.path}"


def _concrete(path: str) -> str:
    """The route's path with every ``{param}`` filled in."""
    return re.sub(r"\{[^}]+\}", "hold_0000000000000000000000000000", path)


def _problem(answer: Answer, status: int, code: str) -> dict[str, Any]:
    assert answer.status == status, answer.body[:500]
    assert answer.headers["Content-Type"].startswith("application/problem+json")
    problem: dict[str, Any] = answer.json
    assert problem["code"] == code, problem
    assert problem["status"] == status
    assert problem["detail"]
    assert problem["retryable"] is False
    return problem


def _tables(server: Server) -> dict[str, int]:
    return server.table_counts()


# -- keys -----------------------------------------------------------------------------


def test_every_v1_route_needs_a_key() -> None:
    assert NEEDS_KEY, "the route table is empty"
    for route in ROUTES:
        if route.path.startswith("/v1/") and route.path != SESSION:
            assert route.auth, f"{_route_id(route)} is open to anyone"
    # The dashboard's files hold no data: every call the page makes needs its session.
    assert {r.path for r in OPEN} <= {
        "/healthz",
        "/openapi.json",
        "/metrics",
        "/dashboard",
        "/dashboard/{name}",
    }


@pytest.mark.parametrize("route", NEEDS_KEY, ids=_route_id)
@pytest.mark.parametrize("raw", [b"{}", b"{not json at all"], ids=["json", "garbage"])
async def test_no_key_is_401_on_every_route(server: Server, route: Route, raw: bytes) -> None:
    before = _tables(server)
    answer = await server.anonymous().request(
        route.method, _concrete(route.path), raw=raw if route.method == "POST" else None
    )
    _problem(answer, 401, "missing_api_key")
    assert _tables(server) == before


@pytest.mark.parametrize("route", NEEDS_KEY, ids=_route_id)
@pytest.mark.parametrize(
    "authorization",
    ["Basic YWxhZGRpbjpvcGVuc2VzYW1l", "Bearer", "Bearer   ", "sw_secret-without-scheme", ""],
)
async def test_a_malformed_authorization_header_is_a_missing_key(
    server: Server, route: Route, authorization: str
) -> None:
    await server.key()  # a real key exists; these headers still name none
    answer = await server.anonymous().request(
        route.method,
        _concrete(route.path),
        raw=b"{}" if route.method == "POST" else None,
        headers={"Authorization": authorization},
    )
    _problem(answer, 401, "missing_api_key")


@pytest.mark.parametrize("route", NEEDS_KEY, ids=_route_id)
async def test_an_unknown_key_is_401_invalid_api_key(server: Server, route: Route) -> None:
    real = await server.key()
    assert real.secret is not None
    before = _tables(server)
    for secret in ("sw_not-a-key-anyone-was-given", real.secret + "x", real.secret.upper()):
        client = Client(server.session, server.base, secret)
        answer = await client.request(
            route.method, _concrete(route.path), raw=b"{}" if route.method == "POST" else None
        )
        _problem(answer, 401, "invalid_api_key")
    assert _tables(server) == before


@pytest.mark.parametrize(
    "route", [r for r in OPEN if r.method == "GET" and "{" not in r.path], ids=_route_id
)
async def test_open_routes_need_no_key(server: Server, route: Route) -> None:
    answer = await server.anonymous().get(route.path)
    assert answer.status == 200
    if route.path == "/metrics":  # the Prometheus text format, not JSON
        assert answer.headers["Content-Type"].startswith("text/plain")
        return
    if route.path == "/dashboard":  # the dashboard's page
        assert answer.headers["Content-Type"].startswith("text/html")
        return
    assert answer.headers["Content-Type"].startswith("application/json")
    assert isinstance(answer.json, dict)


async def test_healthz_and_openapi_answer_without_a_key(server: Server) -> None:
    anonymous = server.anonymous()
    health = await anonymous.get("/healthz")
    assert health.status == 200
    assert health.json == {"status": "ok", "process": os.getpid()}  # served in-process here
    spec = await anonymous.get("/openapi.json")
    assert spec.status == 200
    assert spec.json["openapi"].startswith("3.1")


async def test_the_scheme_name_is_case_insensitive(server: Server) -> None:
    agent = await server.key()
    answer = await server.anonymous().get(
        "/v1/holds", headers={"Authorization": f"bearer {agent.secret}"}
    )
    assert answer.status == 200


# -- roles ------------------------------------------------------------------------------


@pytest.fixture
def slot() -> dict[str, Any]:
    return {
        "workflow_id": "wf-roles",
        "attendees": ["alex@example.com"],
        "start": "2030-10-14T14:00:00Z",
        "duration_minutes": 30,
        "title": "Sync",
    }


async def test_a_reviewer_cannot_create_commit_or_release(
    server: Server, slot: dict[str, Any]
) -> None:
    agent = await server.key(agent="agent-a")
    reviewer = await server.key(agent="rev-1", role="reviewer")
    hold = (await agent.create(slot)).json
    before = _tables(server)

    _problem(await reviewer.create({**slot, "workflow_id": "wf-rev"}), 403, "role_forbidden")
    _problem(await reviewer.commit(hold["id"], hold["token"]), 403, "role_forbidden")
    _problem(await reviewer.release(hold["id"]), 403, "role_forbidden")
    for tool, args in (
        ("create_calendar_hold", {k: v for k, v in slot.items() if k != "workflow_id"}),
        ("commit_calendar_hold", {"hold_id": hold["id"], "token": hold["token"]}),
        ("release_calendar_hold", {"hold_id": hold["id"]}),
    ):
        call = {"workflow_id": "wf-rev", "tool": tool, "arguments": args}
        _problem(await reviewer.post("/v1/tool-calls", call), 403, "role_forbidden")

    assert _tables(server) == before
    still = await agent.get(f"/v1/holds/{hold['id']}")
    assert still.json["status"] == "held"


async def test_a_reviewer_can_read_everything(server: Server, slot: dict[str, Any]) -> None:
    agent = await server.key(agent="agent-a")
    reviewer = await server.key(agent="rev-1", role="reviewer")
    hold = (await agent.create(slot)).json

    one = await reviewer.get(f"/v1/holds/{hold['id']}")
    assert one.status == 200
    assert one.json == hold
    listed = await reviewer.get("/v1/holds?workflow_id=wf-roles")
    assert listed.status == 200
    assert [h["id"] for h in listed.json["items"]] == [hold["id"]]
    free = await reviewer.get(
        "/v1/availability?attendees=alex@example.com"
        "&from=2030-10-14T13:00:00Z&to=2030-10-14T15:00:00Z"
    )
    assert free.status == 200
    assert [(b["start"], b["end"]) for b in free.json["busy"]] == [(hold["start"], hold["end"])]
    slots = await reviewer.post(
        "/v1/tool-calls",
        {
            "tool": "find_free_slots",
            "arguments": {
                "attendees": ["alex@example.com"],
                "from": "2030-10-14T14:00:00Z",
                "to": "2030-10-14T16:00:00Z",
                "duration_minutes": 30,
            },
        },
    )
    assert slots.status == 200
    assert {"start": "2030-10-14T14:00:00Z", "end": "2030-10-14T14:30:00Z"} not in slots.json[
        "slots"
    ]
    audit = await reviewer.get("/v1/audit")
    assert audit.status == 200
    assert [e["hold_id"] for e in audit.json["items"]] == [hold["id"]]
    verify = await reviewer.get("/v1/audit/verify")
    assert verify.status == 200
    assert verify.json["ok"] is True
    assert verify.json["count"] == 1


@pytest.mark.parametrize("role", ["agent", "reviewer"])
async def test_only_an_admin_may_edit_the_directory(server: Server, role: Any) -> None:
    doc = {"id": "alex", "name": "Alex", "emails": ["alex@example.com", "a.lex@example.com"]}
    caller = await server.key(agent=f"{role}-1", role=role)
    before = _tables(server)
    _problem(await caller.post("/v1/attendees", doc), 403, "role_forbidden")
    assert _tables(server) == before

    admin = await server.key(agent="ops", role="admin")
    done = await admin.post("/v1/attendees", doc)
    assert done.status == 200
    assert done.json == {
        "id": "alex",
        "name": "Alex",
        "emails": ["a.lex@example.com", "alex@example.com"],
    }


# -- ownership ------------------------------------------------------------------------


async def test_only_the_owner_commits(server: Server, slot: dict[str, Any]) -> None:
    owner = await server.key(agent="agent-a")
    colleague = await server.key(agent="agent-b")
    admin = await server.key(agent="ops", role="admin")
    hold = (await owner.create(slot)).json
    before = _tables(server)

    _problem(await colleague.commit(hold["id"], hold["token"]), 403, "not_hold_owner")
    _problem(await admin.commit(hold["id"], hold["token"]), 403, "not_hold_owner")
    via_tool = await colleague.post(
        "/v1/tool-calls",
        {
            "tool": "commit_calendar_hold",
            "arguments": {"hold_id": hold["id"], "token": hold["token"]},
        },
    )
    _problem(via_tool, 403, "not_hold_owner")
    assert _tables(server) == before

    mine = await owner.commit(hold["id"], hold["token"])
    assert mine.status == 200
    assert mine.json["status"] == "committed"


async def test_another_agent_cannot_release_but_an_admin_can(
    server: Server, slot: dict[str, Any]
) -> None:
    owner = await server.key(agent="agent-a")
    colleague = await server.key(agent="agent-b")
    admin = await server.key(agent="ops", role="admin")
    hold = (await owner.create(slot)).json
    before = _tables(server)

    _problem(await colleague.release(hold["id"]), 403, "not_hold_owner")
    assert _tables(server) == before

    released = await admin.release(hold["id"])
    assert released.status == 200
    assert released.json["id"] == hold["id"]
    assert released.json["status"] == "released"
    assert released.headers["Idempotent-Replayed"] == "false"
    seen = await owner.get(f"/v1/holds/{hold['id']}")
    assert seen.json["status"] == "released"
    # the slot is free again for anyone of the tenant
    again = await colleague.create({**slot, "workflow_id": "wf-other"})
    assert again.status == 201


# -- tenants --------------------------------------------------------------------------------


async def test_another_tenants_hold_is_not_found(server: Server, slot: dict[str, Any]) -> None:
    a = await server.key(tenant="acme", agent="agent-a")
    b = await server.key(tenant="globex", agent="agent-a")  # same agent name, other tenant
    b_admin = await server.key(tenant="globex", agent="ops", role="admin")
    hold = (await a.create(slot)).json
    hid = hold["id"]
    before = _tables(server)

    for answer in (
        await b.get(f"/v1/holds/{hid}"),
        await b.commit(hid, hold["token"]),
        await b.release(hid),
        await b_admin.release(hid),
        await b.post(
            "/v1/tool-calls",
            {"tool": "commit_calendar_hold", "arguments": {"hold_id": hid, "token": 1}},
        ),
        await b.post(
            "/v1/tool-calls", {"tool": "release_calendar_hold", "arguments": {"hold_id": hid}}
        ),
    ):
        _problem(answer, 404, "hold_not_found")
    assert _tables(server) == before

    # indistinguishable from a hold that does not exist at all
    theirs = (await b.get(f"/v1/holds/{hid}")).json
    missing_id = "hold_" + "0" * len(hid.removeprefix("hold_"))
    missing = (await b.get(f"/v1/holds/{missing_id}")).json
    assert theirs["detail"].replace(hid, "ID") == missing["detail"].replace(missing_id, "ID")
    assert {k: v for k, v in theirs.items() if k != "detail"} == {
        k: v for k, v in missing.items() if k != "detail"
    }

    assert (await a.get(f"/v1/holds/{hid}")).json == hold


async def test_lists_and_audit_are_per_tenant(server: Server, slot: dict[str, Any]) -> None:
    a = await server.key(tenant="acme", agent="agent-a")
    b = await server.key(tenant="globex", agent="agent-b")
    a_hold = (await a.create(slot)).json
    assert (await a.commit(a_hold["id"], a_hold["token"])).status == 200
    b_hold = (await b.create({**slot, "start": "2030-10-15T14:00:00Z"})).json

    for query in ("", "?workflow_id=wf-roles", "?attendee=alex@example.com", "?status=committed"):
        listed = await b.get(f"/v1/holds{query}")
        assert listed.status == 200
        assert a_hold["id"] not in [h["id"] for h in listed.json["items"]], query
    assert [h["id"] for h in (await b.get("/v1/holds")).json["items"]] == [b_hold["id"]]
    assert [h["id"] for h in (await a.get("/v1/holds")).json["items"]] == [a_hold["id"]]

    b_audit = (await b.get("/v1/audit")).json["items"]
    assert [e["hold_id"] for e in b_audit] == [b_hold["id"]]
    assert [e["seq"] for e in b_audit] == [1]
    a_audit = (await a.get("/v1/audit")).json["items"]
    assert [e["hold_id"] for e in a_audit] == [a_hold["id"], a_hold["id"]]
    assert not {e["key"] for e in a_audit} & {e["key"] for e in b_audit}

    b_verify = (await b.get("/v1/audit/verify")).json
    a_verify = (await a.get("/v1/audit/verify")).json
    assert b_verify == {"ok": True, "count": 1, "head": b_audit[-1]["hash"]}
    assert a_verify == {"ok": True, "count": 2, "head": a_audit[-1]["hash"]}

    b_busy = await b.get(
        "/v1/availability?attendees=alex@example.com"
        "&from=2030-10-14T00:00:00Z&to=2030-10-16T00:00:00Z"
    )
    assert [(x["start"], x["kind"]) for x in b_busy.json["busy"]] == [
        ("2030-10-15T14:00:00Z", "held")
    ]


async def test_two_tenants_never_block_each_other(server: Server, slot: dict[str, Any]) -> None:
    a = await server.key(tenant="acme", agent="agent-a", priority=10)
    b = await server.key(tenant="globex", agent="agent-a", priority=90)
    first = await a.create(slot)
    second = await b.create(slot)  # same workflow, attendee email, slot; higher priority
    assert first.status == 201
    assert second.status == 201, second.json
    assert not second.replayed
    assert second.key != first.key
    assert second.json["id"] != first.json["id"]
    assert second.json["attendees"] != first.json["attendees"]

    # nobody was preempted, both commit
    assert (await a.get(f"/v1/holds/{first.json['id']}")).json["status"] == "held"
    assert (await a.commit(first.json["id"], first.json["token"])).status == 200
    assert (await b.commit(second.json["id"], second.json["token"])).status == 200
    assert server.counts()["holds"] == 2
    assert server.overlapping_pairs() == 0
