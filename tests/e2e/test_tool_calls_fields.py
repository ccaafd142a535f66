"""A wrong argument is named by its path in the body, as the caller wrote it,
over real HTTP on SQLite and PostgreSQL: an unknown one (``foo``, or
``workflow_id`` and ``step`` put inside the arguments) and an alias's error
(``end_time``, not the ``end`` it stands for)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from slotward.engine.tools import CREATE_HOLD
from tests.e2e.conftest import Server

PATH = "/v1/tool-calls"
ARGS = {"attendees": ["alex@example.com"], "start": "2030-10-14T14:00:00Z", "duration_minutes": 30}


def openai(args: Any) -> dict[str, Any]:
    return {"id": "c", "type": "function",
            "function": {"name": CREATE_HOLD.name, "arguments": json.dumps(args)}}  # fmt: skip


@pytest.mark.parametrize("name", ["foo", "workflow_id", "step"])
async def test_an_unknown_argument_is_named_by_its_path(server: Server, name: str) -> None:
    agent = await server.key()
    args = {**ARGS, name: 1}
    single = await agent.post(PATH, {"workflow_id": "wf-1", **openai(args)})
    assert (single.status, single.json["code"]) == (422, "unknown_field")
    assert single.json["field"] == f"function.arguments.{name}"
    batch = await agent.post(PATH, {"workflow_id": "wf-1", "tool_calls": [openai(args)]})
    problem = batch.json["results"][0]["problem"]
    assert (problem["code"], problem["field"]) == (
        "unknown_field", f"tool_calls[0].function.arguments.{name}",
    )  # fmt: skip
    assert server.counts()["holds"] == 0


async def test_an_aliases_error_names_the_alias_sent(server: Server) -> None:
    agent = await server.key()
    args = {"attendees": ["b@example.com"], "start_time": "2030-10-14T14:00:00Z",
            "end_time": "garbage"}  # fmt: skip
    batch = await agent.post(PATH, {"workflow_id": "wf-2", "tool_calls": [openai(args)]})
    problem = batch.json["results"][0]["problem"]
    assert problem["field"] == "tool_calls[0].function.arguments.end_time"
    assert "'end'" not in problem["detail"]
    # The canonical name sent is named as sent.
    plain = {"attendees": ["b@example.com"], "start": "2030-10-14T14:00:00Z", "end": "garbage"}
    again = await agent.post(PATH, {"workflow_id": "wf-2", "tool_calls": [openai(plain)]})
    assert again.json["results"][0]["problem"]["field"] == "tool_calls[0].function.arguments.end"
