"""Agents' envelopes at POST /v1/tool-calls, over real HTTP on SQLite and PostgreSQL.

One intent lands on one key whichever envelope carries it; a batch runs in
order and each call keeps its own outcome; ``?reply=`` answers with the
tool-result message the model API takes next, a conflict included; a broken
envelope is a 422 naming its field, and nothing is written.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from slotward.engine.tools import COMMIT_HOLD, CREATE_HOLD, FIND_FREE_SLOTS, RELEASE_HOLD
from tests.e2e.conftest import Client, Server
from tests.e2e.test_bad_input import assert_problem, snapshot

PATH = "/v1/tool-calls"
ARGS = {"attendees": ["alex@example.com"], "start": "2030-10-14T14:00:00Z", "duration_minutes": 30}
# The same intent reworded: another key order, another offset, end for a duration,
# the email's case and spaces, a new title.
REWORDED = {
    "title": "Alex / sync",
    "end": "2030-10-14T16:30:00+02:00",
    "start": "2030-10-14T16:00:00+02:00",
    "attendees": [" Alex@Example.com"],
}
BESIDE = {"workflow_id": "wf-42", "step": 3}


def openai(args: Any, name: str = CREATE_HOLD.name, call_id: str = "call_1") -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": args}}


def anthropic(args: Any, name: str = CREATE_HOLD.name, call_id: str = "toolu_1") -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": name, "input": args}


def responses(args: str, name: str = CREATE_HOLD.name, call_id: str = "call_r") -> dict[str, Any]:
    """A function_call item of OpenAI's Responses API."""
    return {"type": "function_call", "id": "fc_1", "call_id": call_id, "name": name,
            "arguments": args, "status": "completed"}  # fmt: skip


@pytest.fixture
async def agent(server: Server) -> Client:
    return await server.key()


def content(message: dict[str, Any]) -> Any:
    return json.loads(message["content"])


async def test_one_intent_lands_on_one_key_on_every_path(server: Server, agent: Client) -> None:
    first = await agent.create({**BESIDE, **ARGS, "title": "Sync"})
    assert first.status == 201
    assert not first.replayed
    # Released first: while the hold lives, any key of the workflow's slot answers
    # with it, which would hide a call id leaking into the key. Now only the very
    # same key replays.
    assert (await agent.release(first.json["id"])).status == 200
    bodies = [
        {**BESIDE, "tool": CREATE_HOLD.name, "arguments": REWORDED},
        {**BESIDE, **openai(json.dumps(REWORDED, indent=1))},
        {**BESIDE, **openai(REWORDED, call_id="call_other")},
        {**BESIDE, **anthropic(REWORDED), "agent_thought": "retrying"},
        {**BESIDE, **responses(json.dumps(REWORDED))},
    ]
    for body in bodies:
        again = await agent.post(PATH, body)
        assert (again.status, again.key, again.replayed) == (201, first.key, True), body
        assert again.body == first.body  # the first answer, byte for byte
    said = {"type": "text", "text": "on it"}
    batches = [
        {**BESIDE, "role": "assistant", "content": None,
         "tool_calls": [openai(json.dumps(REWORDED))]},
        {**BESIDE, "role": "assistant", "content": [said, anthropic(REWORDED)]},
        {**BESIDE, "output": [{"type": "reasoning", "id": "rs_1", "summary": []},
                              responses(json.dumps(REWORDED))]},
    ]  # fmt: skip
    for body in batches:
        (result,) = (await agent.post(PATH, body)).json["results"]
        assert (result["status"], result["idempotency_key"], result["replayed"]) == (
            201, first.key, True,
        )  # fmt: skip
        assert result["body"] == first.json
    assert server.counts()["holds"] == 1


async def test_a_batch_runs_in_order_and_each_call_keeps_its_outcome(
    server: Server, agent: Client
) -> None:
    rival = await server.key(agent="agent-b")
    taken = await rival.create({"workflow_id": "wf-b", **ARGS})
    assert taken.status == 201
    later = {**ARGS, "start": "2030-10-14T16:00:00Z"}
    window = {"attendees": ARGS["attendees"], "from": "2030-10-14T13:00:00Z",
              "to": "2030-10-14T17:00:00Z", "duration_minutes": 30}  # fmt: skip
    message = {
        "workflow_id": "wf-42",
        "tool_calls": [
            openai(json.dumps(ARGS), call_id="call_taken"),
            openai(json.dumps(later), call_id="call_free"),
            openai('{"attendees": ["alex@example.com"]}', call_id="call_no_start"),
            openai(json.dumps(window), name=FIND_FREE_SLOTS.name, call_id="call_read"),
            openai(json.dumps(later), call_id="call_again"),
        ],
    }
    before = server.counts()["holds"]
    answer = await agent.post(PATH, message)
    assert answer.status == 200
    results = answer.json["results"]
    assert [(r["index"], r["id"], r["status"]) for r in results] == [
        (0, "call_taken", 409), (1, "call_free", 201), (2, "call_no_start", 422),
        (3, "call_read", 200), (4, "call_again", 201),
    ]  # fmt: skip
    conflict = results[0]["problem"]
    assert conflict["code"] == "slot_conflict"
    assert conflict["alternatives"]
    assert results[0]["idempotency_key"] is not None
    assert results[2]["problem"]["field"] == "tool_calls[2].function.arguments.start"
    assert results[2]["idempotency_key"] is None
    # The read sees the hold the call before it placed; the repeat replays it.
    placed = results[1]["body"]
    busy = [(b["start"], b["end"]) for b in results[3]["body"]["busy"]]
    assert busy == [(taken.json["start"], taken.json["end"]), (placed["start"], placed["end"])]
    assert (results[1]["replayed"], results[4]["replayed"]) == (False, True)
    assert results[4]["idempotency_key"] == results[1]["idempotency_key"]
    assert results[3]["idempotency_key"] is None
    assert server.counts()["holds"] == before + 1
    assert server.overlapping_pairs() == 0


async def test_an_openai_reply_is_the_tool_message_even_for_a_conflict(
    server: Server, agent: Client
) -> None:
    placed = await agent.post(f"{PATH}?reply=openai", {**BESIDE, **openai(json.dumps(ARGS))})
    assert placed.status == 200
    assert placed.headers["Slotward-Tool-Status"] == "201"
    assert placed.key is not None
    assert not placed.replayed
    hold = content(placed.json)
    assert (placed.json["role"], placed.json["tool_call_id"]) == ("tool", "call_1")
    assert hold["status"] == "held"
    assert hold["key"] == placed.key

    rival = await server.key(agent="agent-b")
    refused = await rival.post(f"{PATH}?reply=openai", {"workflow_id": "wf-b", **openai(ARGS)})
    assert refused.status == 200  # a result for the model, not a transport failure
    assert refused.headers["Slotward-Tool-Status"] == "409"
    problem = content(refused.json)
    assert problem["code"] == "slot_conflict"
    assert problem["alternatives"]
    assert f"call {CREATE_HOLD.name} again" in problem["what_to_do"]
    # The model does as it is told: the first alternative lands.
    pick = problem["alternatives"][0]
    chosen = {**ARGS, "start": pick["start"], "end": pick["end"]}
    chosen.pop("duration_minutes")
    booked = await rival.post(f"{PATH}?reply=openai", {"workflow_id": "wf-b", **openai(chosen)})
    assert booked.headers["Slotward-Tool-Status"] == "201"
    assert server.overlapping_pairs() == 0


async def test_an_anthropic_reply_answers_every_block_in_order(
    server: Server, agent: Client
) -> None:
    placed = await agent.create({**BESIDE, **ARGS})
    hold = placed.json
    rival = await server.key(agent="agent-b")
    later = {**ARGS, "start": "2030-10-14T16:00:00Z"}
    assert (await rival.create({"workflow_id": "wf-b", **later})).status == 201
    message = {
        "workflow_id": "wf-42",
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "commit, then try the taken slot", "signature": "s"},
            anthropic({"hold_id": hold["id"], "token": hold["token"]}, COMMIT_HOLD.name, "toolu_a"),
            anthropic(later, CREATE_HOLD.name, "toolu_b"),
            anthropic({"hold_id": "hold_nope"}, RELEASE_HOLD.name, "toolu_c"),
        ],
    }
    answer = await agent.post(f"{PATH}?reply=anthropic", message)
    assert answer.status == 200
    assert "Slotward-Tool-Status" not in answer.headers  # a batch: each block says its own
    reply = answer.json
    assert reply["role"] == "user"
    blocks = reply["content"]
    assert [(b["type"], b["tool_use_id"], b["is_error"]) for b in blocks] == [
        ("tool_result", "toolu_a", False),
        ("tool_result", "toolu_b", True),
        ("tool_result", "toolu_c", True),
    ]
    assert content(blocks[0])["status"] == "committed"
    taken = content(blocks[1])
    assert (taken["code"], len(taken["alternatives"]) > 0) == ("slot_conflict", True)
    assert content(blocks[2])["status"] == 404
    # The same message in OpenAI's words: a list of tool messages, in order.
    openai_message = {"workflow_id": "wf-42", "tool_calls": [
        openai(json.dumps({"hold_id": hold["id"], "token": hold["token"]}), COMMIT_HOLD.name, "c1"),
        openai(json.dumps({"hold_id": "hold_nope"}), RELEASE_HOLD.name, "c2"),
    ]}  # fmt: skip
    listed = (await agent.post(f"{PATH}?reply=openai", openai_message)).json
    assert [(m["role"], m["tool_call_id"]) for m in listed] == [("tool", "c1"), ("tool", "c2")]
    assert content(listed[0])["status"] == "committed"  # a repeat commit replays


async def test_a_responses_reply_is_the_function_call_outputs(
    server: Server, agent: Client
) -> None:
    rival = await server.key(agent="agent-b")
    assert (await rival.create({"workflow_id": "wf-b", **ARGS})).status == 201
    later = {**ARGS, "start": "2030-10-14T16:00:00Z"}
    output = [responses(json.dumps(ARGS), call_id="call_a"),
              {"type": "message", "id": "msg_1", "role": "assistant", "content": []},
              responses(json.dumps(later), call_id="call_b")]  # fmt: skip
    answer = await agent.post(f"{PATH}?reply=openai", {"workflow_id": "wf-42", "output": output})
    assert answer.status == 200
    items = answer.json
    assert [(i["type"], i["call_id"]) for i in items] == [
        ("function_call_output", "call_a"),
        ("function_call_output", "call_b"),
    ]
    taken, placed = (json.loads(i["output"]) for i in items)
    assert (taken["code"], placed["status"]) == ("slot_conflict", "held")
    assert taken["alternatives"]
    single = await agent.post(f"{PATH}?reply=openai", {"workflow_id": "wf-42", **output[2]})
    assert single.json["type"] == "function_call_output"
    assert (single.headers["Slotward-Tool-Status"], single.replayed) == ("201", True)


NO_ARGS = json.dumps(ARGS)
# A broken envelope: 422 naming the field, nothing run, nothing written.
BAD = [
    pytest.param("", {**BESIDE, "type": "function", "function": {"arguments": NO_ARGS}},
                 "missing_field", "function.name", id="openai-no-name"),
    pytest.param("", {**BESIDE, **openai('{"start": 1, "start": 2}')}, "invalid_field",
                 "function.arguments", id="openai-duplicate-key"),
    pytest.param("", {**BESIDE, **openai("[1]")}, "invalid_field", "function.arguments",
                 id="openai-array"),
    pytest.param("", {**BESIDE, **openai('{"duration_minutes": NaN}')}, "invalid_field",
                 "function.arguments", id="openai-nan"),
    pytest.param("", {**BESIDE, **openai({**ARGS, "start": 5})}, "invalid_field",
                 "function.arguments.start", id="openai-start-number"),
    pytest.param("", {**BESIDE, **openai(NO_ARGS, name="book_meeting")}, "invalid_field",
                 "function.name", id="openai-unknown-tool"),
    pytest.param("", {**BESIDE, **anthropic({"start": "x"})}, "missing_field",
                 "input.attendees", id="anthropic-no-attendees"),
    pytest.param("", {**BESIDE, **anthropic("[]")}, "invalid_field", "input",
                 id="anthropic-input-string"),
    pytest.param("", {**openai(NO_ARGS), "step": 3}, "missing_field", "workflow_id",
                 id="create-without-workflow"),
    pytest.param("", {**openai(NO_ARGS), "workflow_id": "wf", "step": -1}, "invalid_step",
                 "step", id="negative-step"),
    pytest.param("", {**BESIDE, "type": "function_call", "name": CREATE_HOLD.name,
                      "arguments": NO_ARGS}, "missing_field", "call_id", id="responses-no-call-id"),
    pytest.param("", {**BESIDE, "output": [responses("[]"), {"type": "file_search_call"}]},
                 "invalid_field", "output[1].type", id="responses-other-item"),
    pytest.param("", {**BESIDE, "type": "image"}, "invalid_field", "type",
                 id="unknown-type"),
    pytest.param("", {**BESIDE, "tool_calls": [openai(NO_ARGS), {"type": "function"}]},
                 "missing_field", "tool_calls[1].function", id="batch-frame"),
    pytest.param("", {**BESIDE, "tool_calls": [openai(NO_ARGS, call_id=f"c{i}")
                                              for i in range(17)]},
                 "invalid_field", "tool_calls", id="batch-too-long"),
    pytest.param("?reply=openai", {**BESIDE, "tool": CREATE_HOLD.name, "arguments": ARGS},
                 "missing_field", "id", id="reply-without-id"),
    pytest.param("?reply=anthropic",
                 {**BESIDE, "content": [anthropic(ARGS), {**anthropic(ARGS), "id": None}]},
                 "invalid_field", "content[1].id", id="reply-null-id"),
    pytest.param("?reply=openai", {**BESIDE, "tool_calls": [openai(NO_ARGS),
                                   {"type": "function", "function": openai(NO_ARGS)["function"]}]},
                 "missing_field", "tool_calls[1].id", id="reply-batch-without-id"),
    pytest.param("?reply=gemini", {**BESIDE, **openai(NO_ARGS)}, "invalid_field", "reply",
                 id="unknown-reply"),
]  # fmt: skip


@pytest.mark.parametrize(("query", "body", "code", "field"), BAD)
async def test_a_bad_envelope_is_refused_naming_its_field(
    server: Server, agent: Client, query: str, body: dict[str, Any], code: str, field: str
) -> None:
    before = snapshot(server)
    assert_problem(await agent.post(PATH + query, body), 422, code, field)
    assert snapshot(server) == before


async def test_a_broken_client_key_is_refused_before_any_call(
    server: Server, agent: Client
) -> None:
    # The made-up tool would fail on its own; the header is the frame's and fails first.
    body = {**BESIDE, **openai(NO_ARGS, name="book_meeting")}
    answer = await agent.post(f"{PATH}?reply=openai", body, headers={"Idempotency-Key": "x" * 256})
    assert_problem(answer, 422, "invalid_idempotency_key", "Idempotency-Key")


async def test_a_refusal_found_once_the_key_is_known_still_names_it(
    server: Server, agent: Client
) -> None:
    past = {**ARGS, "start": "2030-09-30T14:00:00Z"}
    via_holds = await agent.create({**BESIDE, **past})
    via_openai = await agent.post(PATH, {**BESIDE, **openai(json.dumps(past))})
    assert_problem(via_openai, 422, "start_in_past", "function.arguments.start")
    assert via_openai.key is not None
    assert via_openai.key == via_holds.key  # the same intent, the same key, refused alike


async def test_a_batch_takes_no_client_key(server: Server, agent: Client) -> None:
    body = {**BESIDE, "tool_calls": [openai(NO_ARGS)]}
    answer = await agent.post(PATH, body, headers={"Idempotency-Key": "mine-1"})
    assert_problem(answer, 422, "invalid_field", "Idempotency-Key")
    assert server.counts()["holds"] == 0


async def test_a_reviewer_is_refused_each_write_of_a_batch(server: Server) -> None:
    reviewer = await server.key(agent="auditor", role="reviewer")
    window = {"attendees": ARGS["attendees"], "from": "2030-10-14T13:00:00Z",
              "to": "2030-10-14T15:00:00Z", "duration_minutes": 30}  # fmt: skip
    calls = [openai(NO_ARGS), openai(window, FIND_FREE_SLOTS.name, "call_2")]
    body = {**BESIDE, "tool_calls": calls}
    results = (await reviewer.post(PATH, body)).json["results"]
    assert [(r["status"], r.get("problem", {}).get("code")) for r in results] == [
        (403, "role_forbidden"), (200, None),
    ]  # fmt: skip
