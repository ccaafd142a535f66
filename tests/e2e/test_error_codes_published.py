"""Every catalogued error code is in the published OpenAPI document.

Read from ``GET /openapi.json`` as a client generator would: the problem
schema's ``code`` lists exactly the catalogue (engine/codes.py), so a client
can switch over every code and knows no other comes.
"""

from __future__ import annotations

import pytest

from slotward.api.http.statuses import STATUSES
from slotward.engine.codes import CODES
from tests.e2e.conftest import Server


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
async def test_the_problem_schema_lists_every_code(server: Server) -> None:
    answer = await server.anonymous().get("/openapi.json")
    assert answer.status == 200
    problem = answer.json["components"]["schemas"]["Problem"]
    listed = problem["properties"]["code"]["enum"]
    assert sorted(listed) == sorted(CODES)
    assert len(listed) == len(set(listed))


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
async def test_answers_carry_a_listed_code_and_its_status(server: Server) -> None:
    """One answer from each place codes come from: the router, auth, the shapes."""
    anonymous, agent = server.anonymous(), await server.key()
    for answer in (
        await anonymous.get("/v1/nowhere"),
        await anonymous.post("/v1/holds", {}),
        await agent.post("/v1/holds", []),
    ):
        assert answer.json["code"] in CODES
        assert answer.status == answer.json["status"] == STATUSES[answer.json["code"]]
