"""`slotward mcp --url`: the tools sent to a real `slotward serve` over HTTP."""

from __future__ import annotations

import subprocess
from pathlib import Path

from slotward.api.mcp.cli import KEY_VARIABLE
from slotward.engine.tools import COMMIT_HOLD, CREATE_HOLD, FIND_FREE_SLOTS
from tests.e2e.mcp_session import agent_key, http_session, mcp_http, stdio_session, structured
from tests.e2e.served import slotward_serve
from tests.e2e.test_cli import SLOTWARD, _free_port
from tests.e2e.test_mcp import SLOT


async def test_the_tools_against_a_server(tmp_path: Path) -> None:
    errlog = tmp_path / "mcp.log"
    with slotward_serve(tmp_path, {}) as served:
        db = tmp_path / "served.db"
        alice, bob = agent_key(db, "alice"), agent_key(db, "bob")
        remote = ["mcp", "--url", served.base]
        async with stdio_session(remote, errlog, {KEY_VARIABLE: alice}) as session:
            first = await session.call_tool(CREATE_HOLD.name, SLOT)
            hold = structured(first)
            again = await session.call_tool(CREATE_HOLD.name, {**SLOT, "title": "Sync, again"})
            async with stdio_session(remote, errlog, {KEY_VARIABLE: bob}) as rival:
                refused = await rival.call_tool(CREATE_HOLD.name, SLOT)
            commit = {"hold_id": hold["id"], "token": hold["token"]}
            committed = structured(await session.call_tool(COMMIT_HOLD.name, commit))
            bad = await session.call_tool(FIND_FREE_SLOTS.name, {"attendees": []})
    assert first.meta == {"slotward/replayed": False, "slotward/idempotency_key": hold["key"]}
    assert structured(again)["id"] == hold["id"]
    assert again.meta
    assert again.meta["slotward/replayed"] is True
    assert refused.is_error
    problem = structured(refused)
    assert problem["code"] == "slot_conflict"
    assert problem["alternatives"]
    assert CREATE_HOLD.name in problem["next"]
    assert committed["status"] == "committed"
    assert bad.is_error
    assert structured(bad)["field"] == "attendees"
    for log in (errlog.read_text(), served.log()):
        assert alice not in log
        assert bob not in log


async def test_streamable_http_passes_each_callers_key_on(tmp_path: Path) -> None:
    with slotward_serve(tmp_path, {}) as served:
        alice = agent_key(tmp_path / "served.db", "alice")
        with mcp_http(["mcp", "--url", served.base], tmp_path / "mcp.log") as url:
            async with http_session(url, alice) as session:
                hold = structured(await session.call_tool(CREATE_HOLD.name, SLOT))
            async with http_session(url, "sw_wrong_key") as wrong:
                refused = await wrong.call_tool(CREATE_HOLD.name, SLOT)
    assert hold["agent_id"] == "alice"
    assert refused.is_error
    assert structured(refused)["code"] == "invalid_api_key"


async def test_a_server_that_does_not_answer_is_a_retryable_tool_error(tmp_path: Path) -> None:
    nobody = f"http://127.0.0.1:{_free_port()}"
    args = ["mcp", "--url", nobody]
    async with stdio_session(args, tmp_path / "mcp.log", {KEY_VARIABLE: "sw_x_y"}) as session:
        result = await session.call_tool(CREATE_HOLD.name, SLOT)
    assert result.is_error
    problem = structured(result)
    assert problem["code"] == "store_unavailable"
    assert problem["retryable"] is True
    assert "sw_x_y" not in result.content[0].text  # type: ignore[union-attr]


def test_a_url_with_credentials_is_refused() -> None:
    argv = [*SLOTWARD, "mcp", "--url", "http://user:secret@127.0.0.1:1", "--key", "k"]
    done = subprocess.run(
        argv, capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60, check=False
    )
    assert done.returncode == 2
    assert "credentials" in done.stderr
    assert "secret" not in done.stderr
