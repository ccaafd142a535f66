"""Each call of a batch counts against the agent's request rate: a batch is no way
around the limiter (api/ratelimit.py), and one past it runs none of its calls."""

from __future__ import annotations

import json
from typing import Any

import pytest

from slotward.engine.tools import CREATE_HOLD, FIND_FREE_SLOTS
from tests.e2e.conftest import Server


@pytest.fixture
def config_overrides() -> dict[str, Any]:
    return {"rate_limit": 1, "rate_burst": 3}  # the test clock stands still: no refill


def batch(n: int) -> dict[str, Any]:
    calls = [
        {"id": f"call_{i}", "type": "function", "function": {"name": CREATE_HOLD.name,
         "arguments": json.dumps({"attendees": ["alex@example.com"], "duration_minutes": 30,
                                  "start": f"2030-10-14T{10 + i}:00:00Z"})}}
        for i in range(n)
    ]  # fmt: skip
    return {"workflow_id": "wf-rate", "tool_calls": calls}


WINDOW = {"tool": FIND_FREE_SLOTS.name, "arguments": {"attendees": ["x@example.com"],
          "from": "2030-10-14T09:00:00Z", "to": "2030-10-14T10:00:00Z",
          "duration_minutes": 30}}  # fmt: skip


async def test_a_batch_costs_one_request_per_call(server: Server) -> None:
    within = await server.key(agent="within")
    answer = await within.post("/v1/tool-calls", batch(3))
    assert [r["status"] for r in answer.json["results"]] == [201, 201, 201]
    refused = await within.post("/v1/tool-calls", batch(1))  # the burst is spent
    assert refused.status == 429
    assert refused.json["code"] == "rate_limited"
    assert "Retry-After" in refused.headers
    assert server.counts()["holds"] == 3  # the refused batch ran none of its calls


async def test_a_refused_batch_spends_nothing(server: Server) -> None:
    agent = await server.key(agent="a")
    assert (await agent.post("/v1/tool-calls", WINDOW)).status == 200  # 2 of 3 tokens left
    refused = await agent.post("/v1/tool-calls", batch(3))
    assert refused.status == 429
    assert refused.headers["Retry-After"] == "1"  # one more token for all three calls
    assert server.counts()["holds"] == 0
    # The batch's calls took nothing: the two tokens are still there.
    assert (await agent.post("/v1/tool-calls", WINDOW)).status == 200
    assert (await agent.post("/v1/tool-calls", WINDOW)).status == 200
    assert (await agent.post("/v1/tool-calls", WINDOW)).status == 429


async def test_waiting_retry_after_lets_a_batch_through(server: Server) -> None:
    agent = await server.key(agent="b")
    for _ in range(3):  # the burst spent
        assert (await agent.post("/v1/tool-calls", WINDOW)).status == 200
    refused = await agent.post("/v1/tool-calls", batch(2))
    assert (refused.status, refused.headers["Retry-After"]) == (429, "2")
    # Retry-After is the wait for both calls (rate 1/s): once waited, the batch runs.
    server.clock.advance(int(refused.headers["Retry-After"]))
    answer = await agent.post("/v1/tool-calls", batch(2))
    assert answer.status == 200, answer.json
    assert [r["status"] for r in answer.json["results"]] == [201, 201]


async def test_a_batch_larger_than_the_burst_is_refused_as_not_retryable(server: Server) -> None:
    agent = await server.key(agent="past")
    refused = await agent.post("/v1/tool-calls", batch(4))
    assert refused.status == 422
    assert (refused.json["code"], refused.json["field"]) == ("invalid_field", "tool_calls")
    assert refused.json["retryable"] is False
    assert "Retry-After" not in refused.headers
    assert server.counts()["holds"] == 0
    # The refusal cost one request, as any refused body does, not four.
    assert (await agent.post("/v1/tool-calls", batch(2))).status == 200


async def test_a_call_sent_again_byte_for_byte_costs_one_request(server: Server) -> None:
    agent = await server.key(agent="again")
    raw = json.dumps({"workflow_id": "wf-again", "tool": CREATE_HOLD.name, "arguments": {
        "attendees": ["gus@example.com"], "start": "2030-10-14T10:00:00Z",
        "duration_minutes": 30}}).encode()  # fmt: skip
    first = await agent.post("/v1/tool-calls", raw=raw)
    again = await agent.post("/v1/tool-calls", raw=raw)  # replayed before its body is read
    assert (first.status, again.status, again.replayed) == (201, 201, True)
    assert (await agent.post("/v1/tool-calls", WINDOW)).status == 200  # the third token
    refused = await agent.post("/v1/tool-calls", raw=raw)  # the burst is spent: no replay
    assert (refused.status, refused.json["code"]) == (429, "rate_limited")
    assert refused.headers["Retry-After"] == "1"  # one token short, not two: counted once
    server.clock.advance(1)
    assert (await agent.post("/v1/tool-calls", raw=raw)).replayed
