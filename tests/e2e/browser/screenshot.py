"""The README's picture of the dashboard (docs/figures/dashboard.png), made anew.

    .venv/bin/python -m tests.e2e.browser.screenshot [--out docs/figures/dashboard.png]

A real server (the production app on a fresh SQLite file, its clock set to a
Monday morning of 2030 so the picture is the same on every run) is given four
attendees, holds of every status, a calendar's busy time, a commit waiting for
approval and an approval an agent asked for; chromium (Debian's, as in the
browser tests) signs in as a reviewer and photographs the page at 1280x800.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
from playwright.async_api import Page, async_playwright, expect
from sqlalchemy import create_engine

from slotward.api.bootstrap import bootstrap, open_store
from slotward.api.config import Config
from slotward.api.http.app import build_app
from slotward.engine.clock import FixedClock
from tests.e2e.browser.chromium import launch, missing
from tests.e2e.browser.dashboard import DAY, Dashboard
from tests.e2e.conftest import Answer, Client, Server, serving

__all__ = ["main", "photograph", "stage"]

OUT = Path(__file__).resolve().parents[3] / "docs" / "figures" / "dashboard.png"
STAGED = datetime(2030, 10, 14, 9, 0, tzinfo=UTC)
NOW = datetime(2030, 10, 14, 9, 40, tzinfo=UTC)  # the moment in the picture
PEOPLE = (
    ("alex", "Alex Moreau"),
    ("priya", "Priya Natarajan"),
    ("sam", "Sam Okafor"),
    ("lena", "Lena Fischer"),
)
# Priya's own calendar (bound through the ICS provider): busy time slotward did not book.
BUSY_ICS = """BEGIN:VCALENDAR
VERSION:2.0
PRODID:-//slotward//screenshot//EN
BEGIN:VEVENT
UID:dentist@example.com
DTSTAMP:20301001T000000Z
DTSTART:20301014T120000Z
DTEND:20301014T133000Z
SUMMARY:Dentist
END:VEVENT
BEGIN:VEVENT
UID:school-run@example.com
DTSTAMP:20301001T000000Z
DTSTART:20301014T080000Z
DTEND:20301014T084500Z
SUMMARY:School run
END:VEVENT
END:VCALENDAR
"""


def _ok(answer: Answer, *statuses: int) -> dict[str, Any]:
    if answer.status not in statuses:
        raise RuntimeError(f"staging failed: {answer.status} {answer.body[:300]!r}")
    doc: dict[str, Any] = answer.json
    return doc


def _hold(workflow: str, who: list[str], start: str, minutes: int, title: str) -> dict[str, Any]:
    return {
        "workflow_id": workflow,
        "attendees": [f"{w}@example.com" for w in who],
        "start": f"{DAY}T{start}:00Z",
        "duration_minutes": minutes,
        "title": title,
        "hold_ttl_seconds": 3600,
    }


async def stage(server: Server, ics: Path) -> Client:
    """Book a realistic morning; answer the reviewer who will look at it."""
    admin = await server.key(agent="ops", role="admin")
    scheduler = await server.key(agent="scheduler", priority=50)
    assistant = await server.key(agent="exec-assistant", priority=80)
    recruiter = await server.key(agent="recruiter", priority=30)
    reviewer = await server.key(agent="ana", role="reviewer")
    for ident, name in PEOPLE:
        body = {"id": ident, "name": name, "emails": [f"{ident}@example.com"]}
        _ok(await admin.post("/v1/attendees", body), 200, 201)
    binding = {"provider": "ics", "url": ics.as_uri()}
    _ok(await admin.request("PUT", "/v1/attendees/priya/calendar", binding), 200, 201)

    # Asked early with a one-minute hold, never committed: expired by now.
    _ok(await recruiter.create({**_hold("wf-vendor", ["priya"], "15:00", 45, "Vendor demo"),
                                "hold_ttl_seconds": 60}), 201)  # fmt: skip
    server.clock.set(datetime(2030, 10, 14, 9, 30, tzinfo=UTC))
    for body in (
        _hold("wf-design", ["alex", "sam"], "10:00", 60, "Design review"),
        _hold("wf-1on1", ["priya", "lena"], "10:30", 30, "1:1 Priya / Lena"),
    ):
        held = _ok(await scheduler.create(body), 201)
        _ok(await scheduler.commit(held["id"], held["token"]), 200)
    _ok(await scheduler.create(_hold("wf-acme", ["sam"], "11:00", 45, "Customer call: Acme")), 201)
    # A retry of the same call: replayed, counted for its workflow.
    _ok(await scheduler.create(_hold("wf-acme", ["sam"], "11:00", 45, "Acme customer call")), 201)
    lunch = _ok(await scheduler.create(_hold("wf-lunch", ["sam"], "12:30", 60, "Team lunch")), 201)
    _ok(await scheduler.release(lunch["id"]), 200)
    _ok(
        await recruiter.create(_hold("wf-hiring", ["lena"], "14:00", 60, "Candidate interview")),
        201,
    )
    # The assistant's higher priority takes the slot: the interview is preempted.
    _ok(await assistant.create(_hold("wf-board", ["lena", "alex"], "14:00", 60, "Board prep")), 201)

    server.clock.set(datetime(2030, 10, 14, 9, 34, tzinfo=UTC))
    policy = {"require_approval": {"attendees_more_than": 2}}
    _ok(await admin.request("PUT", "/v1/approval-policy", policy), 200)
    trio = ["alex", "priya", "sam"]
    planning = _ok(await scheduler.create(
        _hold("wf-planning", trio, "16:30", 60, "Quarterly planning")), 201)  # fmt: skip
    _ok(await scheduler.commit(planning["id"], planning["token"]), 202)
    server.clock.set(datetime(2030, 10, 14, 9, 37, tzinfo=UTC))
    _ok(await assistant.post("/v1/approvals", {
        "workflow_id": "wf-travel", "summary": "Book a 2-night hotel in Lyon for Alex (412 EUR)",
        "evidence": {"trip": "Lyon offsite", "nights": 2, "price_eur": 412,
                     "policy_cap_eur": 350, "reason": "offsite venue is sold out below the cap"},
        "action": {"type": "travel.book", "hotel": "Hôtel des Célestins"},
    }), 201)  # fmt: skip
    server.clock.set(NOW)
    return reviewer


async def photograph(page: Page, base: str, reviewer: Client, out: Path) -> None:
    """Sign in as the reviewer and take the picture once everything has arrived."""
    await page.clock.set_fixed_time(NOW)
    dash = Dashboard(page, base)
    await dash.signed_in(reviewer)
    await expect(page.locator("#approvals-list .approval")).to_have_count(2)
    await expect(page.locator("#timeline-grid .hold")).to_have_count(13)
    await expect(page.locator("#audit-verdict")).to_have_attribute("data-ok", "true")
    await page.locator(".hold.st-preempted").hover()
    await expect(page.locator("#hold-detail")).to_contain_text("Preempted by")
    out.parent.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=out)


async def run(out: Path) -> None:
    with tempfile.TemporaryDirectory(prefix="slotward-screenshot-") as tmp:
        folder = Path(tmp)
        ics = folder / "priya.ics"
        ics.write_text(BUSY_ICS)
        db = folder / "slotward.db"
        config = Config(db_url=f"sqlite+aiosqlite:///{db}", allow_private_urls=True)
        clock = FixedClock(STAGED)
        services = await bootstrap(config, store=await open_store(config), clock=clock)
        app = build_app(services, config, sweep=False, relay=False)
        engine = create_engine(f"sqlite:///{db}")
        async with serving(app, config) as base, aiohttp.ClientSession() as session:
            server = Server(services, clock, engine, base, session)
            reviewer = await stage(server, ics)
            async with async_playwright() as playwright:
                browser = await launch(playwright)
                context = await browser.new_context(
                    viewport={"width": 1280, "height": 800}, timezone_id="UTC", locale="en-GB"
                )
                await photograph(await context.new_page(), base, reviewer, out)
                await browser.close()
        engine.dispose()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, default=OUT, help=f"where to write it ({OUT.name})")
    args = parser.parse_args(argv)
    if (why := missing()) is not None:
        parser.exit(2, f"{why}\n")
    asyncio.run(run(args.out))
    print(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
