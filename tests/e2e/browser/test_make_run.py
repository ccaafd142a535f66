"""What `make run` promises a person: open the dashboard it prints, sign in with the
reviewer key it prints, and approve an agent's gated commit.

The server is `slotward serve --demo-key` itself (what `make run` runs), in its
own process on its own SQLite file and the real clock; the agent and the admin
are plain HTTP with the keys it printed, the reviewer is chromium.
"""

from __future__ import annotations

import asyncio
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import aiohttp
import pytest
from playwright.async_api import Page, expect

from tests.e2e.browser.dashboard import Dashboard
from tests.e2e.conftest import Client
from tests.e2e.test_cli import SLOTWARD, _free_port

BANNER_LINES = 5  # the URL, three keys, the dashboard's address


@pytest.fixture
def made_run(tmp_path: Path) -> Iterator[list[str]]:
    """`slotward serve --demo-key` on a free port: what it printed, line by line."""
    argv = [*SLOTWARD, "--db", f"sqlite+aiosqlite:///{tmp_path / 'slotward.db'}", "serve",
            "--port", str(_free_port()), "--demo-key"]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        out: IO[str] | None = proc.stdout
        assert out is not None
        yield [out.readline().strip() for _ in range(BANNER_LINES)]  # it listens before it prints
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        if proc.stdout:
            proc.stdout.close()


def _key(line: str, label: str) -> str:
    assert line.startswith(label), line
    return line.rsplit(" ", 1)[-1]


async def test_a_person_approves_an_agents_gated_commit_from_what_make_run_prints(
    made_run: list[str], page: Page
) -> None:
    banner, agent_line, reviewer_line, admin_line, dashboard_line = made_run
    base = banner.split()[2]
    assert banner.startswith(f"slotward serving {base}")
    dashboard = dashboard_line.split()[1]
    assert dashboard == f"{base}/dashboard"
    async with aiohttp.ClientSession() as session:
        agent = Client(session, base, _key(agent_line, "API key (tenant demo, agent demo-agent)"))
        admin = Client(session, base, _key(admin_line, "Admin key (tenant demo, admin"))
        reviewer = Client(session, base, _key(reviewer_line, "Reviewer key (tenant demo, reviewer"))
        policy = {"require_approval": {"attendees_more_than": 1}}
        assert (await admin.request("PUT", "/v1/approval-policy", policy)).status == 200
        hold = (await agent.create({
            "workflow_id": "wf-board", "attendees": ["ceo@example.com", "cfo@example.com"],
            "start": "2099-01-05T14:00:00Z", "duration_minutes": 60, "title": "Board sync",
        })).json  # fmt: skip
        gated = await agent.commit(hold["id"], hold["token"])
        assert gated.status == 202, gated.body
        approval_id = gated.json["approval"]["id"]
        waiting = asyncio.create_task(agent.get(f"/v1/approvals/{approval_id}?wait=60"))

        dash = Dashboard(page, base)
        await page.goto(dashboard)
        await dash.sign_in(reviewer)
        item = dash.approval(approval_id)
        await expect(item).to_be_visible()
        await item.get_by_role("button", name="Approve").click()
        await expect(item).to_have_count(0)
        answered = await waiting
        assert (answered.status, answered.json["status"]) == (200, "approved")
        assert answered.json["decided_by"] == "demo-reviewer"
        committed = await agent.commit(hold["id"], hold["token"])
        assert (committed.status, committed.json["status"]) == (200, "committed")
