"""The dashboard in a real chromium against a real server (docs/dashboard.md).

A person signs in, sees holds arrive without reloading, and approves an
agent's gated commit while the agent long-polls for the answer. Every wait is
for a condition on the page or the API, never for a time.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from playwright.async_api import Page, ViewportSize, expect
from sqlalchemy import Engine

from tests.e2e.browser.dashboard import DAY, Dashboard
from tests.e2e.conftest import Client, Server
from tests.e2e.receiver import Receiver, Reply, eventually
from tests.e2e.test_relay import Relayed, relayed

SQLITE = pytest.mark.parametrize("database", ["sqlite"], indirect=True)
HOSTILE = '<img src=x onerror="window.__pwned=1">'
BOARD: dict[str, Any] = {
    "workflow_id": "wf-board",
    "attendees": ["ceo@example.com", "cfo@example.com"],
    "start": f"{DAY}T14:00:00Z",
    "duration_minutes": 60,
    "title": "Board sync",
}


async def people(server: Server) -> tuple[Client, Client, Client]:
    """The agent that books, a reviewer, an admin."""
    agent = await server.key(agent="booker")
    reviewer = await server.key(agent="ana", role="reviewer")
    admin = await server.key(agent="ops", role="admin")
    return agent, reviewer, admin


async def require_approval(admin: Client) -> None:
    """The tenant's policy: a commit with more than one attendee waits for a person."""
    answer = await admin.request(
        "PUT", "/v1/approval-policy", {"require_approval": {"attendees_more_than": 1}}
    )
    assert answer.status == 200, answer.body


async def gated_hold(agent: Client) -> tuple[dict[str, Any], dict[str, Any]]:
    """A hold whose commit waits: the hold and its approval, from the 202."""
    created = await agent.create(BOARD)
    assert created.status == 201, created.body
    hold = created.json
    gated = await agent.commit(hold["id"], hold["token"])
    assert gated.status == 202, gated.body
    assert gated.json["outcome"] == "approval_required"
    return hold, gated.json["approval"]


@SQLITE
async def test_an_agent_key_is_refused_and_a_reviewer_signs_in_with_a_cookie(
    server: Server, page: Page
) -> None:
    agent, reviewer, _ = await people(server)
    dash = Dashboard(page, server.base)
    await dash.open()
    await dash.sign_in(agent)
    await expect(dash.signin_error).to_contain_text("only reviewer and admin keys")
    await expect(page.locator("#app")).to_be_hidden()

    await dash.sign_in(reviewer)
    await expect(page.locator("#who-text")).to_contain_text("ana · reviewer")
    await expect(dash.live).to_have_attribute("data-state", "live")
    await expect(page.locator("#admin")).to_be_hidden()  # webhooks are an admin's
    # The key went in a POST body only: never in the URL, never kept by the page.
    assert reviewer.secret
    assert reviewer.secret not in page.url
    assert await page.locator("#signin-key").input_value() == ""
    stored = await page.evaluate("JSON.stringify([localStorage, sessionStorage])")
    assert reviewer.secret not in stored
    cookies = await page.context.cookies()
    assert cookies, "no session cookie"
    assert all(c["httpOnly"] and c["sameSite"] == "Strict" for c in cookies), cookies
    assert all(reviewer.secret not in c["value"] for c in cookies)

    await page.locator("#sign-out").click()
    await expect(page.locator("#signin")).to_be_visible()
    await page.reload()
    await expect(page.locator("#signin")).to_be_visible()  # signed out for good


@SQLITE
async def test_a_session_ended_elsewhere_asks_for_a_key_again(server: Server, page: Page) -> None:
    _, reviewer, _ = await people(server)
    dash = Dashboard(page, server.base)
    await dash.signed_in(reviewer)
    # Another tab of the same browser signs out: the cookie's session ends.
    session = await page.request.get(f"{server.base}/v1/session")
    token = (await session.json())["csrf_token"]
    ended = await page.request.delete(f"{server.base}/v1/session", headers={"X-CSRF-Token": token})
    assert ended.status == 204
    await page.get_by_role("button", name="Verify the chain").click()
    await expect(page.locator("#signin")).to_be_visible()
    await expect(dash.signin_error).to_contain_text("session has ended")
    await expect(dash.live).to_have_attribute("data-state", "off")


async def has_dead(app: Relayed) -> bool:
    return bool(await app.events("dead"))


@SQLITE
async def test_an_admin_sees_the_webhooks_and_redrives_a_dead_event(
    database: tuple[str, Engine], page: Page
) -> None:
    # The production app with its relay, on the real clock: one failed try is dead.
    async with (
        Receiver(default=Reply(500)) as receiver,
        relayed(database, relay_schedule=(0.0,)) as app,
    ):
        hook = await app.subscribe(receiver.url)
        receiver.secrets.append(hook["secret"])
        await app.hold("alex@example.com")
        await eventually(lambda: has_dead(app), 20)
        [dead] = await app.events("dead")
        dash = Dashboard(page, app.base)
        await dash.signed_in(app.admin)
        await expect(page.locator("#admin")).to_be_visible()
        await expect(page.locator("#webhook-list")).to_contain_text(receiver.url)
        item = page.locator("#dead-list li").filter(has_text=dead["id"])
        await expect(item).to_contain_text("hold.created")
        receiver.default = Reply(200)
        await item.get_by_role("button", name="Re-drive").click()
        await expect(item).to_have_count(0)
        await expect(page.locator("#dead-empty")).to_be_visible()
        await eventually(app.settled, 20)


@SQLITE
async def test_a_hold_placed_after_the_page_loaded_appears_without_a_reload(
    server: Server, page: Page
) -> None:
    agent, reviewer, _ = await people(server)
    dash = Dashboard(page, server.base)
    await dash.signed_in(reviewer)
    await dash.mark()
    created = await agent.create({**BOARD, "title": "Quarterly review"})
    assert created.status == 201, created.body
    hold = dash.hold(created.json["id"])
    await expect(hold).to_have_attribute("data-status", "held")
    await expect(hold).to_contain_text("Quarterly review")
    await expect(page.locator("#audit-rows")).to_contain_text("hold.create")
    # Preempted by a higher priority: still visible, and says by what.
    boss = await server.key(agent="chief-of-staff", priority=90)
    offsite = {"workflow_id": "wf-ceo", "start": f"{DAY}T14:30:00Z", "title": "CEO offsite"}
    won = await boss.create({**BOARD, **offsite})
    assert won.status == 201, won.body
    await expect(hold).to_have_attribute("data-status", "preempted")
    await hold.focus()
    await expect(page.locator("#hold-detail")).to_contain_text("Preempted by")
    await expect(page.locator("#hold-detail")).to_contain_text("CEO offsite")
    assert await dash.unreloaded()


@SQLITE
async def test_the_week_view_the_dates_and_an_added_attendee(server: Server, page: Page) -> None:
    agent, reviewer, admin = await people(server)
    dana = {"id": "dana", "name": "Dana Scully", "emails": ["dana@example.com"]}
    assert (await admin.post("/v1/attendees", dana)).status in (200, 201)
    created = await agent.create(BOARD)
    assert created.status == 201, created.body
    dash = Dashboard(page, server.base)
    await dash.signed_in(reviewer)
    hold = dash.hold(created.json["id"])
    await expect(hold).to_be_visible()
    await page.get_by_role("button", name="Week").click()
    await expect(page.get_by_role("button", name="Week")).to_have_attribute("aria-pressed", "true")
    await expect(hold).to_be_visible()
    assert "view=week" in page.url
    await page.get_by_role("button", name="Next").click()
    await expect(hold).to_have_count(0)
    await page.get_by_role("button", name="Previous").click()
    await expect(hold).to_be_visible()
    await page.get_by_label("Attendee id or email").fill("dana@example.com")
    await page.get_by_label("Attendee id or email").press("Enter")
    await expect(page.locator("#timeline-grid .tl-label")).to_contain_text(["Dana Scully"])
    assert "attendee=dana%40example.com" in page.url


async def test_a_reviewer_approves_a_gated_commit_while_the_agent_long_polls(
    server: Server, page: Page
) -> None:
    agent, reviewer, admin = await people(server)
    await require_approval(admin)
    dash = Dashboard(page, server.base)
    await dash.signed_in(reviewer)
    await dash.mark()

    hold, approval = await gated_hold(agent)
    poll = asyncio.create_task(agent.get(f"/v1/approvals/{approval['id']}?wait=60"))
    item = dash.approval(approval["id"])
    await expect(item).to_be_visible()
    await expect(item.locator("h3")).to_have_text(approval["summary"])
    await expect(item.locator(".gated")).to_contain_text("Board sync")
    await expect(dash.hold(hold["id"])).to_have_attribute("data-status", "held")
    assert not poll.done()  # the agent is still waiting for a person

    await item.get_by_label("Note (optional)").fill("fine, the board asked for it")
    await item.get_by_role("button", name="Approve").click()
    await expect(item).to_have_count(0)  # a decided approval leaves the queue
    answered = await poll
    assert answered.status == 200, answered.body
    assert answered.json["status"] == "approved"
    assert answered.json["note"] == "fine, the board asked for it"
    assert answered.json["decided_by"] == "ana"

    committed = await agent.commit(hold["id"], hold["token"])
    assert committed.status == 200, committed.body
    assert committed.json["status"] == "committed"
    await expect(dash.hold(hold["id"])).to_have_attribute("data-status", "committed")
    await expect(page.locator("#approvals-count")).to_have_text("0")
    assert await dash.unreloaded()


@SQLITE
async def test_hostile_text_from_agents_is_shown_as_text_and_runs_nothing(
    server: Server, page: Page
) -> None:
    agent, reviewer, _ = await people(server)
    evidence = {"note": "</pre><script>window.__pwned=1</script>", HOSTILE: [HOSTILE]}
    asked = await agent.post(
        "/v1/approvals",
        {"workflow_id": "wf-x", "summary": HOSTILE, "evidence": evidence,
         "action": {"type": HOSTILE}},
    )  # fmt: skip
    assert asked.status == 201, asked.body
    booked = await agent.create({**BOARD, "title": HOSTILE})
    assert booked.status == 201, booked.body
    dash = Dashboard(page, server.base)
    await dash.signed_in(reviewer)
    item = dash.approval(asked.json["id"])
    await expect(item.locator("h3")).to_have_text(HOSTILE)
    await expect(item.locator(".evidence")).to_contain_text("<script>window.__pwned=1</script>")
    await expect(dash.hold(booked.json["id"])).to_contain_text(HOSTILE)
    assert await page.locator("img[src=x], script:not([src])").count() == 0
    assert await page.evaluate("window.__pwned === undefined")


PHONE: ViewportSize = {"width": 390, "height": 844}


@SQLITE
@pytest.mark.parametrize("viewport", [PHONE], indirect=True)
async def test_on_a_phone_nothing_is_wider_than_the_screen(server: Server, page: Page) -> None:
    agent, reviewer, admin = await people(server)
    await require_approval(admin)
    await gated_hold(agent)
    long_word = "x" * 180
    asked = await agent.post(
        "/v1/approvals",
        {"workflow_id": "wf-long", "summary": long_word, "evidence": {long_word: long_word}},
    )
    assert asked.status == 201, asked.body
    dash = Dashboard(page, server.base)
    await dash.signed_in(reviewer)
    await expect(page.locator("#approvals-list .approval")).to_have_count(2)
    await expect(page.locator("#timeline-grid .hold")).not_to_have_count(0)
    width = await page.evaluate("document.documentElement.scrollWidth")
    assert width <= PHONE["width"]
    # Nor is anything cut off at the edge: only boxes that scroll (the timeline's,
    # the tables') may hold something wider than themselves.
    overflowing = await page.evaluate(
        """() => [...document.querySelectorAll("body *")].filter((el) => {
            const box = el.getBoundingClientRect();
            if (box.width === 0 || box.right <= window.innerWidth + 1) return false;
            for (let up = el.parentElement; up; up = up.parentElement) {
                if (["auto", "scroll"].includes(getComputedStyle(up).overflowX)) return false;
            }
            return !el.closest(".visually-hidden");
        }).map((el) => el.tagName + "#" + el.id + "." + el.className)"""
    )
    assert overflowing == []


@SQLITE
async def test_the_approve_button_is_reached_by_tab_and_pressed_with_enter(
    server: Server, page: Page
) -> None:
    agent, reviewer, admin = await people(server)
    await require_approval(admin)
    _, approval = await gated_hold(agent)
    dash = Dashboard(page, server.base)
    await dash.signed_in(reviewer)
    approve = dash.approval(approval["id"]).get_by_role("button", name="Approve")
    await expect(approve).to_be_visible()
    reached = False
    for _ in range(40):  # from the top of the page, Tab by Tab
        await page.keyboard.press("Tab")
        if await approve.evaluate("(button) => document.activeElement === button"):
            reached = True
            break
    assert reached, "the Approve button is not reachable by Tab"
    outline = await approve.evaluate("(button) => getComputedStyle(button).outlineStyle")
    assert outline not in ("", "none")  # the focus is visible
    await page.keyboard.press("Enter")
    await expect(dash.approval(approval["id"])).to_have_count(0)
    read = await agent.get(f"/v1/approvals/{approval['id']}")
    assert (read.json["status"], read.json["decided_by"]) == ("approved", "ana")
