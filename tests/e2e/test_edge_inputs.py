"""Inputs at the edges of their types: refused with a 4xx, never a 500."""

from __future__ import annotations

import pytest

from tests.e2e.conftest import Server


@pytest.mark.parametrize(
    "path",
    [
        "/v1/holds?limit=%C2%B2",
        "/v1/holds?limit=99999999999999999999999",
        "/v1/audit?cursor=%C2%B2",
        "/v1/audit?limit=%C2%B9",
        "/v1/audit?cursor=99999999999999999999999",
        "/v1/audit?cursor=" + "9" * 5000,
        "/v1/availability?attendees=a@example.com&from=2030-10-14T09:00:00Z"
        "&to=2030-10-14T17:00:00Z&duration_minutes=%C2%B2",
        "/v1/availability?attendees=a@example.com&from=9999-12-31T23:00:00Z"
        "&to=9999-12-31T23:59:00Z&duration_minutes=60",
    ],
)
async def test_odd_query_values_are_422(server: Server, path: str) -> None:
    agent = await server.key()
    answer = await agent.get(path)
    assert answer.status == 422, answer.body
    assert answer.json["code"] in {"invalid_field", "invalid_datetime"}


@pytest.mark.parametrize(
    "start",
    ["2030-10-14T10:00+24:00", "2030-10-14T10:00+00:60", "9999-12-31T22:00:00Z"],
)
async def test_out_of_range_instants_are_422(server: Server, start: str) -> None:
    agent = await server.key()
    body = {"workflow_id": "wf", "attendees": ["a@example.com"], "duration_minutes": 30}
    answer = await agent.create({**body, "start": start})
    assert answer.status == 422, answer.body
    assert answer.json["code"] == "invalid_datetime"
    assert server.counts()["ledger"] == 0


async def test_a_claim_near_the_end_of_the_range_conflicts_cleanly(server: Server) -> None:
    a = await server.key(agent="a")
    b = await server.key(agent="b")
    body = {"attendees": ["a@example.com"], "start": "8999-12-31T22:00:00Z", "duration_minutes": 60}
    assert (await a.create({"workflow_id": "wf-a", **body})).status == 201
    clash = await b.create({"workflow_id": "wf-b", **body, "start": "8999-12-31T22:30:00Z"})
    assert clash.status == 409
    for alt in clash.json["alternatives"]:
        assert alt["end"] <= "9000-01-01T00:00:00Z"
        taken = await b.create({"workflow_id": "wf-b", "attendees": body["attendees"], **alt})
        assert taken.status == 201, taken.json
