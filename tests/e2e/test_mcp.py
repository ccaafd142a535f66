"""`slotward mcp` over a real stdio session, embedded on a real SQLite file.

The client is the mcp package's own (ClientSession over stdio_client), spawning
the command as an MCP host does; the keys are made with `slotward keys create`.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from slotward.api.mcp.cli import KEY_VARIABLE
from slotward.engine.tools import COMMIT_HOLD, CREATE_HOLD, FIND_FREE_SLOTS, RELEASE_HOLD, TOOLS
from tests.e2e.mcp_session import agent_key, stdio_session, structured
from tests.e2e.test_cli import SLOTWARD

SLOT: dict[str, Any] = {
    "attendees": ["alex@example.com"],
    "start": "2030-10-14T14:00:00Z",
    "duration_minutes": 30,
    "title": "Strategy sync",
}


def _mcp(db: Path, *extra: str) -> list[str]:
    return ["mcp", "--db", f"sqlite+aiosqlite:///{db}", *extra]


async def test_the_tools_are_listed_from_the_registry(tmp_path: Path) -> None:
    db = tmp_path / "mcp.db"
    key = agent_key(db, "lister")
    async with stdio_session(_mcp(db), tmp_path / "err.log", {KEY_VARIABLE: key}) as session:
        listed = {tool.name: tool for tool in (await session.list_tools()).tools}
    assert list(listed) == [tool.name for tool in TOOLS]
    for tool in TOOLS:
        announced = listed[tool.name]
        assert announced.description == tool.description
        assert announced.annotations is not None
        hints = announced.annotations.model_dump(by_alias=True, exclude_none=True)
        assert hints == tool.annotations()
        assert announced.output_schema is not None
        assert announced.input_schema["additionalProperties"] is False
    free, create = listed[FIND_FREE_SLOTS.name], listed[CREATE_HOLD.name]
    assert free.annotations
    assert free.annotations.read_only_hint is True
    assert create.annotations
    assert create.annotations.destructive_hint is False
    assert create.annotations.idempotent_hint is True
    release = listed[RELEASE_HOLD.name].annotations
    assert release
    assert release.destructive_hint is True
    assert release.idempotent_hint is True
    assert {"workflow_id", "step", "attendees", "start"} <= set(create.input_schema["properties"])
    assert "workflow_id" not in listed[COMMIT_HOLD.name].input_schema["properties"]
    assert "attendees" in create.input_schema["required"]


async def test_book_retry_conflict_commit_release_and_read(tmp_path: Path) -> None:
    db = tmp_path / "mcp.db"
    alice, bob = agent_key(db, "alice"), agent_key(db, "bob")
    errlog = tmp_path / "err.log"
    async with stdio_session(_mcp(db), errlog, {KEY_VARIABLE: alice}) as session:
        first = await session.call_tool(CREATE_HOLD.name, SLOT)
        assert not first.is_error
        hold = structured(first)
        assert hold["status"] == "held"
        assert hold["workflow_id"].startswith("mcp-")
        assert first.meta == {"slotward/replayed": False, "slotward/idempotency_key": hold["key"]}
        # The answer was lost; the model sends the call again, reworded.
        reworded = {**SLOT, "start": "2030-10-14T16:00:00+02:00", "title": "Alex / sync"}
        again = await session.call_tool(CREATE_HOLD.name, reworded)
        assert structured(again)["id"] == hold["id"]
        assert again.meta
        assert again.meta["slotward/replayed"] is True

        async with stdio_session(_mcp(db), errlog, {KEY_VARIABLE: bob}) as rival:
            claim = {**SLOT, "start": "2030-10-14T14:15:00Z"}
            refused = await rival.call_tool(CREATE_HOLD.name, claim)
        assert refused.is_error
        problem = structured(refused)
        assert problem["code"] == "slot_conflict"
        assert problem["conflicts"][0]["start"] == "2030-10-14T14:00:00Z"
        assert problem["alternatives"], "a conflict offers free alternatives"
        assert CREATE_HOLD.name in problem["next"]

        commit = {"hold_id": hold["id"], "token": hold["token"]}
        committed = structured(await session.call_tool(COMMIT_HOLD.name, commit))
        assert committed["status"] == "committed"
        replay = await session.call_tool(COMMIT_HOLD.name, commit)
        assert replay.meta
        assert replay.meta["slotward/replayed"] is True

        later = {**SLOT, "start": "2030-10-14T15:00:00Z"}
        second = structured(await session.call_tool(CREATE_HOLD.name, later))
        released = structured(await session.call_tool(RELEASE_HOLD.name, {"hold_id": second["id"]}))
        assert released["status"] == "released"

        window = {"attendees": ["alex@example.com"], "duration_minutes": 30,
                  "from": "2030-10-14T14:00:00Z", "to": "2030-10-14T16:00:00Z"}  # fmt: skip
        read = await session.call_tool(FIND_FREE_SLOTS.name, window)
        availability = structured(read)
    assert not read.is_error
    assert [(b["start"], b["kind"]) for b in availability["busy"]] == [
        ("2030-10-14T14:00:00Z", "committed")
    ]
    assert availability["slots"][0] == {
        "start": "2030-10-14T14:30:00Z",
        "end": "2030-10-14T15:00:00Z",
    }
    log = errlog.read_text()
    assert alice not in log
    assert bob not in log


async def test_a_workflow_given_keeps_a_retry_once_across_sessions(tmp_path: Path) -> None:
    """What a client that reconnects does: it names its workflow (docs/mcp.md)."""
    db = tmp_path / "mcp.db"
    key = agent_key(db, "alice")
    call = {**SLOT, "workflow_id": "wf-42", "step": 3}
    holds = []
    for _ in range(2):
        async with stdio_session(_mcp(db), tmp_path / "err.log", {KEY_VARIABLE: key}) as s:
            holds.append(structured(await s.call_tool(CREATE_HOLD.name, call)))
    assert holds[0]["id"] == holds[1]["id"]
    assert holds[0]["workflow_id"] == "wf-42"
    # Without it, the new session's workflow is another: the hold is told apart as its own.
    async with stdio_session(_mcp(db), tmp_path / "err.log", {KEY_VARIABLE: key}) as s:
        lost = await s.call_tool(CREATE_HOLD.name, SLOT)
    assert lost.is_error
    assert [c["same_intent"] for c in structured(lost)["conflicts"]] == [True]
    assert "`workflow_id`" in structured(lost)["next"]
    # --workflow gives every call that names none the same workflow.
    async with stdio_session(
        _mcp(db, "--workflow", "wf-7"), tmp_path / "err.log", {KEY_VARIABLE: key}
    ) as s:
        later = {**SLOT, "start": "2030-10-15T09:00:00Z"}
        assert structured(await s.call_tool(CREATE_HOLD.name, later))["workflow_id"] == "wf-7"


BAD: list[tuple[dict[str, Any], str, str]] = [
    ({"start": "2030-10-14T14:00:00Z", "duration_minutes": 30}, "missing_field", "attendees"),
    ({**SLOT, "start": 1400}, "invalid_field", "start"),
    ({**SLOT, "colour": "blue"}, "unknown_field", "colour"),
    ({**SLOT, "workflow_id": 42}, "invalid_field", "workflow_id"),
    ({**SLOT, "step": "3"}, "invalid_step", "step"),
    ({**SLOT, "start": "2030-10-14T14:00:00"}, "naive_datetime", "start"),
]


async def test_bad_arguments_are_a_tool_error_naming_the_field(tmp_path: Path) -> None:
    db = tmp_path / "mcp.db"
    key = agent_key(db, "alice")
    errlog = tmp_path / "err.log"
    async with stdio_session(_mcp(db), errlog, {KEY_VARIABLE: key}) as session:
        for arguments, code, field in BAD:
            result = await session.call_tool(CREATE_HOLD.name, arguments)
            assert result.is_error, arguments
            problem = structured(result)
            assert (problem["code"], problem["field"]) == (code, field)
            assert field in problem["next"]
        # The session lives on: the next call is served.
        assert not (await session.call_tool(CREATE_HOLD.name, SLOT)).is_error
    assert "Traceback" not in errlog.read_text()


async def test_an_unknown_tool_and_a_reader_key_are_tool_errors(tmp_path: Path) -> None:
    db = tmp_path / "mcp.db"
    reviewer = agent_key(db, "auditor", role="reviewer")
    async with stdio_session(_mcp(db), tmp_path / "err.log", {KEY_VARIABLE: reviewer}) as s:
        unknown = await s.call_tool("book_everything", {})
        forbidden = await s.call_tool(CREATE_HOLD.name, SLOT)
        window = {"attendees": ["alex@example.com"], "duration_minutes": 30,
                  "from": "2030-10-14T14:00:00Z", "to": "2030-10-14T16:00:00Z"}  # fmt: skip
        read = await s.call_tool(FIND_FREE_SLOTS.name, window)
    assert unknown.is_error
    assert structured(unknown)["field"] == "tool"
    assert forbidden.is_error
    assert structured(forbidden)["code"] == "role_forbidden"
    assert not read.is_error


def test_stdio_without_a_valid_key_does_not_start(tmp_path: Path) -> None:
    db = tmp_path / "mcp.db"
    argv = [*SLOTWARD, *_mcp(db)]
    missing = subprocess.run(argv, capture_output=True, text=True, stdin=subprocess.DEVNULL,
                             timeout=60, env={"PATH": "/usr/bin:/bin"})  # fmt: skip
    assert missing.returncode == 2
    assert KEY_VARIABLE in missing.stderr
    assert missing.stdout == ""
    wrong = "sw_nosuchkey_0123456789abcdef"
    refused = subprocess.run([*argv, "--key", wrong], capture_output=True, text=True,
                             stdin=subprocess.DEVNULL, timeout=60)  # fmt: skip
    assert refused.returncode == 2
    assert "invalid_api_key" in refused.stderr
    assert wrong not in refused.stderr
