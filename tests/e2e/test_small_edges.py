"""Small edges a new user tripped over (issue 12, items 8 and 9), over real HTTP.

A negative step, a query parameter given twice, an unencoded ``+`` in a query
time, release without a body as the OpenAPI document describes it, and the
``Slotward-Hold-Status`` header on a replayed commit or release whose hold has
moved on since.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.conftest import Server


@pytest.mark.parametrize("step", [-1, -(2**31), "3", 3.0, True])
@pytest.mark.parametrize("path", ["/v1/holds", "/v1/tool-calls", "/v1/executions"])
async def test_a_step_that_is_not_a_whole_number_from_0_is_invalid_step(
    server: Server, hold_body: dict[str, Any], path: str, step: object
) -> None:
    agent = await server.key()
    body: dict[str, Any] = {
        "/v1/holds": {**hold_body, "step": step},
        "/v1/tool-calls": {"workflow_id": "wf-1", "step": step,
                           "tool": "create_calendar_hold", "arguments": hold_body},
        "/v1/executions": {"workflow_id": "wf-1", "step": step, "tool": "send_email",
                           "arguments": {}},
    }[path]  # fmt: skip
    if path == "/v1/tool-calls":
        body["arguments"] = {k: v for k, v in hold_body.items() if k not in ("workflow_id", "step")}
    before = server.counts()
    answer = await agent.post(path, body)
    assert answer.status == 422, answer.body
    assert answer.json["code"] == "invalid_step"
    assert answer.json["field"] == "step"
    assert server.counts() == before  # nothing written


@pytest.mark.parametrize(
    "query",
    [
        "/v1/holds?status=held&status=expired",
        "/v1/holds?workflow_id=a&workflow_id=b",
        "/v1/availability?attendees=alex@example.com&from=2030-10-14T09:00:00Z"
        "&from=2030-10-15T09:00:00Z&to=2030-10-16T09:00:00Z",
        "/v1/audit?limit=5&limit=500",
    ],
)
async def test_a_query_parameter_given_twice_is_refused(server: Server, query: str) -> None:
    agent = await server.key()
    answer = await agent.get(query)
    assert answer.status == 422, answer.body
    assert answer.json["code"] == "duplicate_field"
    assert answer.headers["Content-Type"].startswith("application/problem+json")


async def test_attendees_may_repeat_as_a_list(server: Server, hold_body: dict[str, Any]) -> None:
    agent = await server.key()
    assert (await agent.create(hold_body)).status == 201
    window = "from=2030-10-14T13:00:00Z&to=2030-10-14T16:00:00Z"
    repeated = await agent.get(
        f"/v1/availability?attendees=alex@example.com&attendees=sam@example.com&{window}"
    )
    listed = await agent.get(
        f"/v1/availability?attendees=alex@example.com,sam@example.com&{window}"
    )
    assert repeated.status == listed.status == 200
    assert repeated.json == listed.json


async def test_an_unencoded_plus_in_a_query_time_is_named_in_the_detail(server: Server) -> None:
    agent = await server.key()
    answer = await agent.get(
        "/v1/availability?attendees=alex@example.com"
        "&from=2030-10-14T14:00:00+02:00&to=2030-10-14T18:00:00Z"
    )
    assert answer.status == 422
    assert answer.json["code"] == "invalid_datetime"
    assert "%2B" in answer.json["detail"]
    encoded = await agent.get(
        "/v1/availability?attendees=alex@example.com"
        "&from=2030-10-14T14:00:00%2B02:00&to=2030-10-14T18:00:00Z"
    )
    assert encoded.status == 200


async def test_release_takes_no_body_as_the_openapi_document_says(
    server: Server, hold_body: dict[str, Any]
) -> None:
    agent = await server.key()
    spec = (await server.anonymous().get("/openapi.json")).json
    release = spec["paths"]["/v1/holds/{hold_id}/release"]["post"]
    assert release["requestBody"]["required"] is False
    commit = spec["paths"]["/v1/holds/{hold_id}/commit"]["post"]
    assert commit["requestBody"]["required"] is True
    hold = (await agent.create(hold_body)).json
    answer = await agent.release(hold["id"])  # no body at all
    assert answer.status == 200
    assert answer.json["status"] == "released"


async def test_a_replayed_commit_says_the_hold_was_released_since(
    server: Server, hold_body: dict[str, Any]
) -> None:
    agent = await server.key()
    admin = await server.key(agent="ops", role="admin")
    hold = (await agent.create(hold_body)).json
    first = await agent.commit(hold["id"], hold["token"])
    assert first.status == 200
    assert "Slotward-Hold-Status" not in first.headers  # not a replay: the body is the truth
    assert (await admin.release(hold["id"])).status == 200
    again = await agent.commit(hold["id"], hold["token"])
    assert again.status == 200
    assert again.replayed
    assert again.body == first.body  # the first answer, byte for byte
    assert again.json["status"] == "committed"
    assert again.headers["Slotward-Hold-Status"] == "released"


async def test_a_replayed_release_carries_the_current_status(
    server: Server, hold_body: dict[str, Any]
) -> None:
    agent = await server.key()
    hold = (await agent.create(hold_body)).json
    first = await agent.release(hold["id"])
    again = await agent.release(hold["id"])
    assert again.replayed
    assert again.body == first.body
    assert again.headers["Slotward-Hold-Status"] == "released"


@pytest.mark.parametrize("path", ["/v1/holds", "/v1/tool-calls"])
async def test_a_replayed_create_says_what_became_of_its_hold(
    server: Server, hold_body: dict[str, Any], path: str
) -> None:
    """Released by an admin, expired, preempted: the replay's body is the first answer
    (``held``), its ``Slotward-Hold-Status`` the truth now."""
    agent = await server.key(priority=10)
    admin = await server.key(agent="ops", role="admin")
    rival = await server.key(agent="agent-b", priority=90)

    def body(workflow: str, start: str, **extra: Any) -> dict[str, Any]:
        fields = {**hold_body, "workflow_id": workflow, "start": start, **extra}
        if path == "/v1/holds":
            return fields
        arguments = {k: v for k, v in fields.items() if k not in ("workflow_id", "step")}
        return {"workflow_id": workflow, "step": fields.get("step"),
                "tool": "create_calendar_hold", "arguments": arguments}  # fmt: skip

    released = body("wf-released", "2030-10-14T14:00:00Z")
    expiring = body("wf-expired", "2030-10-15T14:00:00Z", hold_ttl_seconds=60)
    preempted = body("wf-preempted", "2030-10-16T14:00:00Z")
    firsts = {}
    for name, call in (("released", released), ("expired", expiring), ("preempted", preempted)):
        firsts[name] = await agent.post(path, call)
        assert firsts[name].status == 201
        assert "Slotward-Hold-Status" not in firsts[name].headers  # a first answer
    assert (await admin.release(firsts["released"].json["id"])).status == 200
    rivalry = {
        **hold_body,
        "workflow_id": "wf-rival",
        "start": "2030-10-16T14:00:00Z",
        "duration_minutes": 45,
    }  # another intent: the same one would stand down
    assert (await rival.create(rivalry)).status == 201  # priority 90 preempts 10
    server.clock.advance(120)
    for name, call in (("released", released), ("expired", expiring), ("preempted", preempted)):
        again = await agent.post(path, call)
        assert again.replayed
        assert again.body == firsts[name].body  # byte for byte, "held" and all
        assert again.headers["Slotward-Hold-Status"] == name
