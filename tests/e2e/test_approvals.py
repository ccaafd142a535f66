"""Approvals over real HTTP, on SQLite and PostgreSQL: open one, decide it, wait for it,
and commits a tenant's policy sends to a person (docs/approvals.md)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from tests.e2e.conftest import Answer, Client, Server, until
from tests.e2e.test_waiters import (
    SIGNALLED_WITHIN,
    SLOW_POLL,
    CountingStore,
    counted,
    other_instance,
)

ASK: dict[str, Any] = {
    "workflow_id": "wf-refunds",
    "step": 1,
    "summary": "Refund 120 EUR to order 8812",
    "evidence": {"order": 8812, "amount": 120, "reason": "double charge"},
    "action": {"type": "refund", "order": 8812},
}
HOLD: dict[str, Any] = {
    "workflow_id": "wf-board",
    "attendees": ["ceo@example.com", "cfo@example.com"],
    "start": "2030-10-14T14:00:00Z",
    "duration_minutes": 60,
    "title": "Board sync",
}


@pytest.fixture
def store_wrapper() -> Any:
    return CountingStore


async def people(server: Server) -> tuple[Client, Client, Client]:
    """The agent that asks, a reviewer, an admin."""
    agent = await server.key(agent="booker")
    reviewer = await server.key(agent="ana", role="reviewer")
    admin = await server.key(agent="ops", role="admin")
    return agent, reviewer, admin


async def decide(client: Client, approval_id: str, decision: str, note: str = "") -> Answer:
    body = {"decision": decision, **({"note": note} if note else {})}
    return await client.post(f"/v1/approvals/{approval_id}/decision", body)


async def test_an_approval_is_opened_once_decided_once_and_read_back(server: Server) -> None:
    agent, reviewer, admin = await people(server)
    opened = await agent.post("/v1/approvals", ASK)
    assert opened.status == 201
    doc = opened.json
    assert opened.headers["Location"] == f"/v1/approvals/{doc['id']}"
    assert opened.key == doc["key"]
    assert not opened.replayed
    assert (doc["status"], doc["requested_by"], doc["evidence"]) == ("pending", "booker",
                                                                     ASK["evidence"])  # fmt: skip
    # A retry that rewords the summary: the same approval, the first answer.
    again = await agent.post("/v1/approvals", {**ASK, "summary": "Please refund order 8812"})
    assert (again.status, again.replayed, again.body) == (201, True, opened.body)
    assert again.headers["Slotward-Approval-Status"] == "pending"
    refused = await decide(agent, doc["id"], "approve")
    assert (refused.status, refused.json["code"]) == (403, "role_forbidden")
    approved = await decide(reviewer, doc["id"], "approve", "customer called")
    assert approved.status == 200
    assert (approved.json["status"], approved.json["note"]) == ("approved", "customer called")
    assert not approved.replayed
    same = await decide(admin, doc["id"], "approve")
    assert (same.status, same.replayed, same.body) == (200, True, approved.body)
    other = await decide(admin, doc["id"], "deny")
    assert (other.status, other.json["code"]) == (409, "approval_decided")
    read = await agent.get(f"/v1/approvals/{doc['id']}")
    assert (read.status, read.json["status"], read.json["decided_by"]) == (200, "approved", "ana")
    verified = await reviewer.get("/v1/audit/verify")
    assert verified.json["ok"]
    actions = [e["action"] for e in (await reviewer.get("/v1/audit")).json["items"]]
    assert actions == ["approval.request", "approval.approve"]
    outbox = (await admin.get("/v1/outbox")).json["items"]
    assert [e["type"] for e in outbox] == ["approval.requested", "approval.approved"]


async def test_the_asking_agent_never_decides_and_other_tenants_see_nothing(
    server: Server,
) -> None:
    agent, _, _ = await people(server)
    doc = (await agent.post("/v1/approvals", ASK)).json
    itself = await server.key(agent="booker", role="reviewer")  # the same agent id
    refused = await decide(itself, doc["id"], "approve")
    assert (refused.status, refused.json["code"]) == (403, "own_approval")
    stranger = await server.key(tenant="globex", agent="ana", role="reviewer")
    for answer in (await stranger.get(f"/v1/approvals/{doc['id']}"),
                   await decide(stranger, doc["id"], "deny")):  # fmt: skip
        assert (answer.status, answer.json["code"]) == (404, "approval_not_found")
    assert (await stranger.get("/v1/approvals")).json["items"] == []


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"summary": "two\nlines"}, "summary"),
        ({"summary": ""}, "summary"),
        ({"evidence": "x" * 33000}, "evidence"),
        ({"action": {"type": "hold.commit"}}, "action"),
        ({"action": {"kind": "refund"}}, "action.type"),
        ({"expires_in_seconds": 59}, "expires_in_seconds"),
        ({"expires_in_seconds": 604801}, "expires_in_seconds"),
        ({"step": "1"}, "step"),
        ({"surprise": 1}, "surprise"),
        ({"workflow_id": None}, "workflow_id"),
    ],
)
async def test_bad_requests_are_422_naming_the_field_and_write_nothing(
    server: Server, change: dict[str, Any], field: str
) -> None:
    agent, _, _ = await people(server)
    before = server.table_counts()
    body = {k: v for k, v in {**ASK, **change}.items() if v is not None}
    refused = await agent.post("/v1/approvals", body)
    assert refused.status == 422, refused.body
    assert refused.json["field"] == field
    missing = await agent.post("/v1/approvals", {k: v for k, v in ASK.items() if k != "evidence"})
    assert (missing.status, missing.json["code"]) == (422, "missing_field")
    assert server.table_counts() == before


async def test_a_long_poll_is_answered_by_the_decision_not_by_polling(server: Server) -> None:
    agent, reviewer, _ = await people(server)
    doc = (await agent.post("/v1/approvals", ASK)).json
    store = counted(server.services.store)
    before = store.reads
    waiting = asyncio.create_task(agent.get(f"/v1/approvals/{doc['id']}?wait=60"))
    await until(lambda: len(server.services.completions) == 1)  # it looked and waits
    await asyncio.sleep(2)  # a poll ten times a second would read some 20 times meanwhile
    during = store.reads - before
    await decide(reviewer, doc["id"], "deny", "not this one")
    answer = await asyncio.wait_for(waiting, SIGNALLED_WITHIN)
    assert answer.status == 200
    assert (answer.json["status"], answer.json["note"]) == ("denied", "not this one")
    # Its first look and the process's fallback, about once a second (a loaded machine
    # may stretch the sleep); a poll ten times a second would be some 20.
    assert during <= 8
    assert len(server.services.completions) == 0


async def test_a_long_poll_ends_at_the_expiry_and_a_decided_one_answers_at_once(
    server: Server,
) -> None:
    agent, reviewer, _ = await people(server)
    short = (await agent.post("/v1/approvals", {**ASK, "expires_in_seconds": 60})).json
    server.clock.advance(60)
    expired = await agent.get(f"/v1/approvals/{short['id']}?wait=60")
    assert expired.json["status"] == "expired"  # unswept, answered at once
    late = await decide(reviewer, short["id"], "approve")
    assert (late.status, late.json["code"]) == (409, "approval_expired")
    assert await server.sweep() == 0  # approvals are not holds: none of those expired
    actions = [e["action"] for e in (await reviewer.get("/v1/audit")).json["items"]]
    assert actions[-1] == "approval.expire"
    bad = await agent.get(f"/v1/approvals/{short['id']}?wait=61")
    assert (bad.status, bad.json["field"]) == (422, "wait")


@pytest.mark.parametrize("database", ["postgres"], indirect=True)
@pytest.mark.parametrize("config_overrides", [SLOW_POLL])
async def test_a_decision_in_another_process_wakes_the_long_poll(
    server: Server, database: tuple[str, Any]
) -> None:
    async with other_instance(server, database[0]) as (_, base):
        agent, reviewer, _ = await people(server)
        doc = (await agent.post("/v1/approvals", ASK)).json
        waiting = asyncio.create_task(agent.get(f"/v1/approvals/{doc['id']}?wait=60"))
        await until(lambda: len(server.services.completions) == 1)
        there = Client(server.session, base, reviewer.secret)
        assert (await decide(there, doc["id"], "approve")).status == 200
        answer = await asyncio.wait_for(waiting, SIGNALLED_WITHIN)  # the wait was 60 s
        assert answer.json["status"] == "approved"


async def test_the_queue_lists_pending_approvals_oldest_first(server: Server) -> None:
    agent, reviewer, _ = await people(server)
    ids = [(await agent.post("/v1/approvals", {**ASK, "step": n})).json["id"] for n in range(3)]
    await decide(reviewer, ids[1], "approve")
    queue = await reviewer.get("/v1/approvals?status=pending")
    assert [a["id"] for a in queue.json["items"]] == [ids[0], ids[2]]
    page = await reviewer.get("/v1/approvals?limit=2")
    assert [a["id"] for a in page.json["items"]] == ids[:2]
    rest = await reviewer.get(f"/v1/approvals?cursor={page.json['next_cursor']}")
    assert [a["id"] for a in rest.json["items"]] == ids[2:]
    bad = await reviewer.get("/v1/approvals?status=waiting")
    assert (bad.status, bad.json["field"]) == (422, "status")


async def test_a_gated_commit_waits_for_one_approval_then_commits(server: Server) -> None:
    agent, reviewer, admin = await people(server)
    policy = {"require_approval": {"attendees_more_than": 1, "outside_domains": ["Example.com"]}}
    put = await admin.request("PUT", "/v1/approval-policy", policy)
    assert put.status == 200
    assert put.json["require_approval"] == {"attendees_more_than": 1,
                                            "outside_domains": ["example.com"]}  # fmt: skip
    assert (await agent.request("PUT", "/v1/approval-policy", policy)).status == 403
    hold = (await agent.create(HOLD)).json
    gated = await agent.commit(hold["id"], hold["token"])
    assert gated.status == 202, gated.body
    approval = gated.json["approval"]
    assert gated.json["outcome"] == "approval_required"
    assert gated.headers["Location"] == f"/v1/approvals/{approval['id']}"
    assert gated.key == gated.headers["Idempotency-Key"]
    assert gated.headers["Idempotent-Replayed"] == "false"
    assert gated.json["hold"]["expires_at"] == approval["expires_at"]
    assert approval["hold_id"] == hold["id"]
    retried = await agent.commit(hold["id"], hold["token"])
    assert (retried.status, retried.json["approval"]["id"]) == (202, approval["id"])
    assert retried.key == gated.key
    waiting = asyncio.create_task(agent.get(f"/v1/approvals/{approval['id']}?wait=60"))
    await until(lambda: len(server.services.completions) == 1)
    await decide(reviewer, approval["id"], "approve", "fine")
    assert (await asyncio.wait_for(waiting, SIGNALLED_WITHIN)).json["status"] == "approved"
    committed = await agent.commit(hold["id"], hold["token"])
    assert (committed.status, committed.json["status"]) == (200, "committed")
    assert committed.key == gated.key
    replayed = await agent.commit(hold["id"], hold["token"])
    assert (replayed.status, replayed.replayed, replayed.body) == (200, True, committed.body)
    assert len((await reviewer.get("/v1/approvals")).json["items"]) == 1


async def test_a_denied_commit_is_409_through_the_tool_envelope_too(server: Server) -> None:
    agent, reviewer, admin = await people(server)
    await admin.request(
        "PUT", "/v1/approval-policy", {"require_approval": {"priority_at_least": 1}}
    )
    hold = (await agent.create(HOLD)).json
    call = {"workflow_id": "wf-board", "tool": "commit_calendar_hold",
            "arguments": {"hold_id": hold["id"], "token": hold["token"]}}  # fmt: skip
    gated = await agent.post("/v1/tool-calls", call)
    assert gated.status == 202
    block = {"type": "tool_use", "id": "toolu_1", "name": "commit_calendar_hold",
             "input": call["arguments"], "workflow_id": "wf-board"}  # fmt: skip
    reply = await agent.post("/v1/tool-calls?reply=anthropic", block)
    assert (reply.status, reply.headers["Slotward-Tool-Status"]) == (200, "202")
    [result] = reply.json["content"]
    assert result["is_error"] is False
    shown = json.loads(result["content"])
    assert shown["outcome"] == "approval_required"
    assert "commit_calendar_hold again" in shown["what_to_do"]
    approval_id = gated.json["approval"]["id"]
    await decide(reviewer, approval_id, "deny", "not with the board")
    denied = await agent.post("/v1/tool-calls", call)
    assert (denied.status, denied.json["code"]) == (409, "approval_denied")
    assert "not with the board" in denied.json["detail"]
