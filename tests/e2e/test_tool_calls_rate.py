"""Each call of a batch counts against the agent's request rate: a batch is no way
around the limiter (api/ratelimit.py), and one past it runs none of its calls."""

from __future__ import annotations

import json
from typing import Any

import pytest

from slotward.engine.tools import CREATE_HOLD
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


async def test_a_batch_costs_one_request_per_call(server: Server) -> None:
    within = await server.key(agent="within")
    answer = await within.post("/v1/tool-calls", batch(3))
    assert [r["status"] for r in answer.json["results"]] == [201, 201, 201]
    assert (await within.post("/v1/tool-calls", batch(1))).status == 429  # the burst is spent

    past = await server.key(agent="past")
    refused = await past.post("/v1/tool-calls", batch(4))
    assert refused.status == 429
    assert refused.json["code"] == "rate_limited"
    assert "Retry-After" in refused.headers
    assert server.counts()["holds"] == 3  # the refused batch ran none of its calls
