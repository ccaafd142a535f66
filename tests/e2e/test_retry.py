"""DESIGN section 7's retry example and the ways one intent may be spelled."""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.conftest import Server


async def test_the_retry_example_lands_once_and_replays_byte_for_byte(
    server: Server, hold_body: dict[str, Any]
) -> None:
    agent = await server.key()
    first = await agent.create({**hold_body, "agent_thought": "book it"})
    retry = await agent.create(
        {
            "title": "Alex / Strategy Sync",
            "duration_minutes": 30,
            "start": "2030-10-14T16:00:00+02:00",
            "attendees": ["Alex@Example.com "],
            "workflow_id": "wf-42",
            "step": 3,
        }
    )
    assert first.status == 201
    assert first.headers["Idempotent-Replayed"] == "false"
    assert retry.status == 201
    assert retry.replayed
    assert retry.key == first.key
    assert retry.key is not None
    assert retry.key.startswith("idem_")
    assert retry.body == first.body
    assert first.json["title"] == "Strategy Sync with Alex"
    assert server.counts()["holds"] == 1


@pytest.mark.parametrize(
    "spelling",
    [
        {"end": "2030-10-14T14:30:00Z"},
        {"duration": "PT30M"},
        {"start": "2030-10-14T10:00:00", "timezone": "America/New_York", "duration_minutes": 30},
        {"start": "2030-10-14T16:00:00", "end": "2030-10-14T16:30:00", "timezone": "Europe/Berlin"},
        {"start": "2030-10-14T14:00:00.000000Z", "duration_minutes": 30},
    ],
)
async def test_every_spelling_of_one_interval_gets_one_key(
    server: Server, hold_body: dict[str, Any], spelling: dict[str, Any]
) -> None:
    agent = await server.key()
    first = await agent.create(hold_body)
    body = {k: v for k, v in hold_body.items() if k != "duration_minutes"}
    again = await agent.create({**body, **spelling})
    assert again.status == 201, again.json
    assert again.key == first.key
    assert again.replayed
    assert server.counts()["holds"] == 1


@pytest.mark.parametrize(
    ("start", "timezone", "code"),
    [
        ("2030-10-14T14:00:00", None, "naive_datetime"),
        ("2030-03-31T02:30:00", "Europe/Berlin", "nonexistent_local_time"),
        ("2030-10-27T02:30:00", "Europe/Berlin", "ambiguous_local_time"),
    ],
)
async def test_unreadable_local_times_get_their_own_422(
    server: Server, hold_body: dict[str, Any], start: str, timezone: str | None, code: str
) -> None:
    agent = await server.key()
    body = {**hold_body, "start": start}
    if timezone:
        body["timezone"] = timezone
    answer = await agent.create(body)
    assert answer.status == 422
    assert answer.headers["Content-Type"].startswith("application/problem+json")
    assert answer.json["code"] == code
    assert answer.json["retryable"] is False
    assert server.counts()["holds"] == 0
    assert server.counts()["ledger"] == 0


async def test_step_drift_while_live_replays_the_live_hold(
    server: Server, hold_body: dict[str, Any]
) -> None:
    agent = await server.key()
    first = await agent.create(hold_body)
    drifted = await agent.create({**hold_body, "step": 7})
    assert drifted.status == 201
    assert drifted.replayed
    assert drifted.body == first.body
    assert drifted.key == first.key
    assert server.counts()["ledger"] == 1  # the drifted key is not recorded


async def test_rebooking_after_release_needs_a_new_step_and_late_duplicates_replay(
    server: Server, hold_body: dict[str, Any]
) -> None:
    agent = await server.key()
    first = await agent.create(hold_body)
    released = await agent.release(first.json["id"])
    assert released.status == 200
    assert released.json["status"] == "released"

    rebooked = await agent.create({**hold_body, "step": 4})
    assert rebooked.status == 201
    assert not rebooked.replayed
    assert rebooked.json["id"] != first.json["id"]

    late = await agent.create(hold_body)  # a late duplicate of the released request
    assert late.status == 201
    assert late.replayed
    assert late.body == first.body


async def test_tool_call_envelope_gets_the_same_key_as_the_endpoint(
    server: Server, hold_body: dict[str, Any]
) -> None:
    agent = await server.key()
    first = await agent.create(hold_body)
    args = {k: v for k, v in hold_body.items() if k not in ("workflow_id", "step")}
    args["start_time"] = args.pop("start")
    call = await agent.post(
        "/v1/tool-calls",
        {
            "workflow_id": "wf-42",
            "step": 3,
            "tool": "create_calendar_hold",
            "arguments": {**args, "reasoning": "the user asked"},
            "agent_thought": "retrying",
        },
    )
    assert call.status == 201
    assert call.replayed
    assert call.key == first.key
    assert call.body == first.body


async def test_client_key_reused_for_another_payload_is_refused(
    server: Server, hold_body: dict[str, Any]
) -> None:
    agent = await server.key()
    headers = {"Idempotency-Key": "order-1234"}
    first = await agent.create(hold_body, headers=headers)
    assert first.status == 201
    assert first.key == "order-1234"
    same = await agent.create({**hold_body, "title": "reworded"}, headers=headers)
    assert same.status == 201
    assert same.replayed
    other = await agent.create({**hold_body, "start": "2030-10-15T14:00:00Z"}, headers=headers)
    assert other.status == 422
    assert other.json["code"] == "idempotency_key_reused"
    assert server.counts()["holds"] == 1
