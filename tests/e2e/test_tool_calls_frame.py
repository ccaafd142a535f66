"""A batch's frame is checked whole before any of its calls runs, over real HTTP
on SQLite and PostgreSQL: a step out of range, a workflow_id missing for a tool
that needs one, or two calls with one id refuse the request, and nothing is
written (docs/agents.md, "Bad envelopes")."""

from __future__ import annotations

import json
from typing import Any

from slotward.engine.rules.fingerprint import MAX_STEP
from slotward.engine.tools import COMMIT_HOLD, CREATE_HOLD, RELEASE_HOLD
from tests.e2e.conftest import Client, Server

PATH = "/v1/tool-calls"
ARGS = {"attendees": ["alex@example.com"], "start": "2030-10-14T14:00:00Z", "duration_minutes": 30}
LATER = {**ARGS, "start": "2030-10-14T18:00:00Z"}


def openai(args: Any, name: str = CREATE_HOLD.name, call_id: str = "call_1") -> dict[str, Any]:
    return {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)}}  # fmt: skip


async def placed(agent: Client) -> tuple[dict[str, Any], dict[str, Any]]:
    hold = (await agent.create({"workflow_id": "wf-1", **ARGS})).json
    commit = openai({"hold_id": hold["id"], "token": hold["token"]}, COMMIT_HOLD.name, "c1")
    return hold, commit


async def test_a_step_out_of_range_refuses_the_batch_before_any_call(server: Server) -> None:
    agent = await server.key()
    hold, commit = await placed(agent)
    for step in (MAX_STEP + 1, 2**53 - 1):
        body = {"workflow_id": "wf-1", "step": step, "tool_calls": [commit, openai(LATER)]}
        answer = await agent.post(PATH, body)
        assert answer.status == 422
        assert (answer.json["code"], answer.json["field"]) == ("invalid_step", "step")
    assert (await agent.get(f"/v1/holds/{hold['id']}")).json["status"] == "held"
    assert server.counts()["holds"] == 1
    edge = {"workflow_id": "wf-1", "step": MAX_STEP, "tool_calls": [openai(LATER)]}
    assert (await agent.post(PATH, edge)).json["results"][0]["status"] == 201


async def test_a_missing_workflow_id_refuses_the_batch_before_any_call(server: Server) -> None:
    agent = await server.key()
    hold, commit = await placed(agent)
    answer = await agent.post(PATH + "?reply=openai", {"tool_calls": [commit, openai(LATER)]})
    assert answer.status == 422
    assert (answer.json["code"], answer.json["field"]) == ("missing_field", "workflow_id")
    assert CREATE_HOLD.name in answer.json["detail"]
    assert (await agent.get(f"/v1/holds/{hold['id']}")).json["status"] == "held"
    # Tools keyed by the hold need none: a batch of those runs without it.
    alone = await agent.post(PATH, {"tool_calls": [commit]})
    assert alone.json["results"][0]["status"] == 200


async def test_two_calls_with_one_id_are_refused_naming_the_second(server: Server) -> None:
    agent = await server.key()
    hold, commit = await placed(agent)
    release = openai({"hold_id": hold["id"]}, RELEASE_HOLD.name, "c1")
    answer = await agent.post(PATH, {"workflow_id": "wf-1", "tool_calls": [commit, release]})
    assert answer.status == 422
    assert (answer.json["code"], answer.json["field"]) == ("invalid_field", "tool_calls[1].id")
    assert (await agent.get(f"/v1/holds/{hold['id']}")).json["status"] == "held"
    uses = [{"type": "tool_use", "id": "t", "name": RELEASE_HOLD.name,
             "input": {"hold_id": hold["id"]}}] * 2  # fmt: skip
    blocks = await agent.post(PATH + "?reply=anthropic", {"workflow_id": "wf-1", "content": uses})
    assert (blocks.status, blocks.json["field"]) == (422, "content[1].id")
