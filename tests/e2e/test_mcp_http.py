"""`slotward mcp --transport streamable-http`, embedded, with the mcp package's
streamable-HTTP client: each request's bearer key is its caller, and each MCP
session its own workflow."""

from __future__ import annotations

from pathlib import Path

from slotward.api.mcp.cli import KEY_VARIABLE
from slotward.engine.tools import CREATE_HOLD
from tests.e2e.mcp_session import agent_key, http_session, mcp_http, structured
from tests.e2e.test_mcp import SLOT


async def test_sessions_over_streamable_http(tmp_path: Path) -> None:
    db = tmp_path / "mcp.db"
    alice, bob = agent_key(db, "alice"), agent_key(db, "bob")
    errlog = tmp_path / "err.log"
    with mcp_http(["mcp", "--db", f"sqlite+aiosqlite:///{db}"], errlog) as url:
        async with http_session(url, alice) as session:
            hold = structured(await session.call_tool(CREATE_HOLD.name, SLOT))
            again = await session.call_tool(CREATE_HOLD.name, SLOT)
        async with http_session(url, alice) as later:
            other = {**SLOT, "start": "2030-10-14T15:00:00Z"}
            second = structured(await later.call_tool(CREATE_HOLD.name, other))
        async with http_session(url, bob) as rival:
            refused = await rival.call_tool(CREATE_HOLD.name, SLOT)
        async with http_session(url) as anonymous:
            unknown = await anonymous.call_tool(CREATE_HOLD.name, SLOT)
    assert hold["agent_id"] == "alice"
    assert structured(again)["id"] == hold["id"]
    assert again.meta
    assert again.meta["slotward/replayed"] is True
    # One workflow per MCP session, stable for its life.
    assert hold["workflow_id"].startswith("mcp-")
    assert second["workflow_id"].startswith("mcp-")
    assert second["workflow_id"] != hold["workflow_id"]
    assert refused.is_error
    problem = structured(refused)
    assert problem["code"] == "slot_conflict"
    assert problem["alternatives"]
    assert unknown.is_error
    assert structured(unknown)["code"] == "missing_api_key"
    log = errlog.read_text()
    assert alice not in log
    assert bob not in log


async def test_the_servers_key_serves_requests_that_send_none(tmp_path: Path) -> None:
    db = tmp_path / "mcp.db"
    carol = agent_key(db, "carol")
    args = ["mcp", "--db", f"sqlite+aiosqlite:///{db}"]
    with mcp_http(args, tmp_path / "err.log", {KEY_VARIABLE: carol}) as url:
        async with http_session(url) as anonymous:
            hold = structured(await anonymous.call_tool(CREATE_HOLD.name, SLOT))
        async with http_session(url, authorization="Basic Y2Fyb2w6eA==") as basic:
            refused = await basic.call_tool(CREATE_HOLD.name, SLOT)
    assert hold["agent_id"] == "carol"
    # Another scheme is not a key: never taken to mean the server's own.
    assert refused.is_error
    assert structured(refused)["code"] == "missing_api_key"
