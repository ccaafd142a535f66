"""`slotward mcp` when a commit waits for a person: embedded (``--db``) and against a
server (``--url``), over real stdio sessions with the mcp package's own client.

The server runs in this process on a real SQLite file and the wall clock (the
MCP process has its own clock: a test clock here would disagree with it);
the embedded MCP process opens the same file, as a second server would. The
mcp client checks each result against the tool's output schema, so a wait
the schema did not admit would fail here. One MCP process per mode.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession

from slotward.api.mcp.cli import KEY_VARIABLE
from slotward.api.mcp.results import AWAITING
from slotward.engine.clock import SystemClock
from slotward.engine.tools import COMMIT_HOLD, CREATE_HOLD, RELEASE_HOLD
from tests.e2e.conftest import Client, Server
from tests.e2e.mcp_session import stdio_session, structured

pytestmark = pytest.mark.parametrize("database", ["sqlite"], indirect=True)

SLOT: dict[str, Any] = {
    "attendees": ["ceo@example.com", "cfo@example.com"],
    "start": "2030-10-14T14:00:00Z",
    "duration_minutes": 60,
    "title": "Board sync",
}


@pytest.fixture
def clock() -> SystemClock:
    return SystemClock()


async def people(server: Server) -> tuple[str, Client]:
    """The agent's key (the MCP server's), and a reviewer; the tenant's policy gates commits
    of more than one attendee."""
    admin = await server.key(agent="ops", role="admin")
    policy = {"require_approval": {"attendees_more_than": 1}}
    assert (await admin.request("PUT", "/v1/approval-policy", policy)).status == 200
    agent = await server.key(agent="booker")
    assert agent.secret is not None
    return agent.secret, await server.key(agent="ana", role="reviewer")


async def decide(reviewer: Client, approval_id: str, decision: str, note: str) -> None:
    body = {"decision": decision, "note": note}
    answer = await reviewer.post(f"/v1/approvals/{approval_id}/decision", body)
    assert answer.status == 200, answer.body


async def waits_then_commits_or_is_refused(session: ClientSession, reviewer: Client) -> None:
    """The model's side: commit, told to wait; commit again once a person decided."""
    hold = structured(await session.call_tool(CREATE_HOLD.name, SLOT))
    commit = {"hold_id": hold["id"], "token": hold["token"]}
    first = await session.call_tool(COMMIT_HOLD.name, commit)
    assert not first.is_error  # nothing went wrong: the booking waits for a person
    waiting = structured(first)
    assert (waiting["outcome"], waiting["next"]) == ("approval_required", AWAITING)
    approval = waiting["approval"]
    assert (approval["status"], approval["hold_id"]) == ("pending", hold["id"])
    assert (waiting["hold"]["id"], waiting["hold"]["status"]) == (hold["id"], "held")
    assert first.meta
    assert first.meta["slotward/idempotency_key"]
    again = structured(await session.call_tool(COMMIT_HOLD.name, commit))
    assert (again["outcome"], again["approval"]["id"]) == ("approval_required", approval["id"])
    await decide(reviewer, approval["id"], "approve", "fine")
    committed = structured(await session.call_tool(COMMIT_HOLD.name, commit))
    assert (committed["id"], committed["status"]) == (hold["id"], "committed")

    another = {**SLOT, "start": "2030-10-15T14:00:00Z"}
    later = structured(await session.call_tool(CREATE_HOLD.name, another))
    commit = {"hold_id": later["id"], "token": later["token"]}
    asked = structured(await session.call_tool(COMMIT_HOLD.name, commit))["approval"]
    await decide(reviewer, asked["id"], "deny", "not with the board")
    refused = await session.call_tool(COMMIT_HOLD.name, commit)
    assert refused.is_error
    problem = structured(refused)
    assert (problem["code"], problem["approval"]["note"]) == (
        "approval_denied",
        "not with the board",
    )
    assert RELEASE_HOLD.name in problem["next"]
    assert "do not commit it again" in problem["next"]
    released = structured(await session.call_tool(RELEASE_HOLD.name, {"hold_id": later["id"]}))
    assert released["status"] == "released"


async def test_embedded_a_commit_waits_for_a_person(
    server: Server, database: tuple[str, Any], tmp_path: Path
) -> None:
    key, reviewer = await people(server)
    errlog = tmp_path / "mcp.log"
    args = ["mcp", "--db", database[0]]
    async with stdio_session(args, errlog, {KEY_VARIABLE: key}) as session:
        await waits_then_commits_or_is_refused(session, reviewer)
    assert key not in errlog.read_text()


async def test_against_a_server_a_commit_waits_for_a_person(server: Server, tmp_path: Path) -> None:
    key, reviewer = await people(server)
    errlog = tmp_path / "mcp.log"
    async with stdio_session(["mcp", "--url", server.base], errlog, {KEY_VARIABLE: key}) as s:
        await waits_then_commits_or_is_refused(s, reviewer)
    assert key not in errlog.read_text()
