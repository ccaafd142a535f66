"""What a model is told after a tool call, over real HTTP on SQLite and PostgreSQL.

A replayed commit says, in the reply handed to the model, what became of the
hold (``hold_status``), as the batch document and Slotward-Hold-Status do; and
following ``what_to_do`` after a released hold leads to a new hold, not back
to the old one.
"""

from __future__ import annotations

import json
from typing import Any

from slotward.engine.tools import COMMIT_HOLD, CREATE_HOLD, FIND_FREE_SLOTS
from tests.e2e.conftest import Server

PATH = "/v1/tool-calls"
ARGS = {"attendees": ["alex@example.com"], "start": "2030-10-14T14:00:00Z", "duration_minutes": 30}


def openai(name: str, args: dict[str, Any], **beside: Any) -> dict[str, Any]:
    call = {"id": "call_1", "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)}}  # fmt: skip
    return {"workflow_id": "wf-1", **beside, **call}


async def test_a_replayed_commit_tells_the_model_the_hold_moved_on(server: Server) -> None:
    agent = await server.key()
    admin = await server.key(agent="boss", role="admin")
    hold = (await agent.create({"workflow_id": "wf-1", **ARGS})).json
    commit = openai(COMMIT_HOLD.name, {"hold_id": hold["id"], "token": hold["token"]})
    assert (await agent.post(PATH, commit)).status == 200
    assert (await admin.release(hold["id"])).status == 200  # the hold moved on

    replied = await agent.post(PATH + "?reply=openai", commit)
    assert replied.headers["Idempotent-Replayed"] == "true"
    assert replied.headers["Slotward-Hold-Status"] == "released"
    shown = json.loads(replied.json["content"])
    assert (shown["status"], shown["hold_status"]) == ("committed", "released")

    tool_use = {"type": "tool_use", "id": "t1", "name": COMMIT_HOLD.name,
                "input": {"hold_id": hold["id"], "token": hold["token"]}}  # fmt: skip
    blocks = await agent.post(PATH + "?reply=anthropic", {"workflow_id": "wf-1",
                              "content": [tool_use, {**tool_use, "id": "t2"}]})  # fmt: skip
    for block in blocks.json["content"]:
        assert json.loads(block["content"])["hold_status"] == "released"


async def test_following_what_to_do_after_a_release_leads_to_a_new_hold(server: Server) -> None:
    agent = await server.key()
    admin = await server.key(agent="boss", role="admin")
    step = {"step": 3}
    placed = await agent.post(PATH + "?reply=openai", openai(CREATE_HOLD.name, ARGS, **step))
    hold = json.loads(placed.json["content"])
    assert (await admin.release(hold["id"])).status == 200  # e.g. an admin freed it

    commit = openai(COMMIT_HOLD.name, {"hold_id": hold["id"], "token": hold["token"]}, **step)
    told = json.loads((await agent.post(PATH + "?reply=openai", commit)).json["content"])
    assert told["code"] == "hold_released"
    advice = told["what_to_do"]
    assert FIND_FREE_SLOTS.name in advice
    assert CREATE_HOLD.name in advice
    assert "another start" in advice
    assert "new step" in advice

    # The model does as told: finds free slots, and holds another start, same step.
    window = {"attendees": ARGS["attendees"], "from": "2030-10-14T13:00:00Z",
              "to": "2030-10-14T16:00:00Z", "duration_minutes": 30}  # fmt: skip
    found = await agent.post(PATH + "?reply=openai", openai(FIND_FREE_SLOTS.name, window))
    slots = json.loads(found.json["content"])["slots"]
    other = next(slot for slot in slots if slot["start"] != hold["start"])
    args = {"attendees": ARGS["attendees"], "start": other["start"], "end": other["end"]}
    again = await agent.post(PATH + "?reply=openai", openai(CREATE_HOLD.name, args, **step))
    assert again.headers["Slotward-Tool-Status"] == "201"
    assert again.headers["Idempotent-Replayed"] == "false"
    fresh = json.loads(again.json["content"])
    assert fresh["id"] != hold["id"]
    assert fresh["status"] == "held"

    # What it was warned of: the very same slot in the same step is the released hold.
    same = await agent.post(PATH + "?reply=openai", openai(CREATE_HOLD.name, ARGS, **step))
    assert json.loads(same.json["content"])["id"] == hold["id"]
