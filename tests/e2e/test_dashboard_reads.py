"""The dashboard's reads over real HTTP, on SQLite and PostgreSQL: the timeline (holds
of every status and an ICS calendar's busy time, bound as an admin binds it) and
the workflows by replays; each answer checked against the OpenAPI document.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import HOLD_BODY, Client, Server
from tests.e2e.signed_in import sign_in
from tests.e2e.test_openapi import conform

ALEX, SAM, KIM = "alex@example.com", "sam@example.com", "kim@example.com"
DAY = "from=2030-10-14T00:00:00Z&to=2030-10-15T00:00:00Z"
# A dentist's appointment, and a meeting overlapping it: one busy span.
ICS = """BEGIN:VCALENDAR\r
VERSION:2.0\r
PRODID:-//slotward tests//EN\r
BEGIN:VEVENT\r
UID:dentist-1@example.com\r
DTSTAMP:20300901T000000Z\r
DTSTART:20301014T080000Z\r
DTEND:20301014T090000Z\r
SUMMARY:Dentist (private)\r
END:VEVENT\r
BEGIN:VEVENT\r
UID:standup-1@example.com\r
DTSTAMP:20300901T000000Z\r
DTSTART:20301014T083000Z\r
DTEND:20301014T093000Z\r
SUMMARY:Standup\r
END:VEVENT\r
END:VCALENDAR\r
"""


@pytest.fixture
def config_overrides() -> dict[str, Any]:
    """An ICS file is read through file://, which only a private-URL server allows."""
    return {"secret_key": "dashboard-secret-key-0123456789", "allow_private_urls": True}


@pytest.fixture
async def spec(server: Server) -> dict[str, Any]:
    doc: dict[str, Any] = (await server.anonymous().get("/openapi.json")).json
    return doc


async def _hold(agent: Client, attendees: list[str], start: str, wf: str) -> dict[str, Any]:
    body = {**HOLD_BODY, "workflow_id": wf, "attendees": attendees, "start": start}
    made = await agent.create(body)
    assert made.status == 201, made.body[:300]
    doc: dict[str, Any] = made.json
    return doc


async def test_the_timeline_shows_every_status_and_the_calendars_busy_time(
    server: Server, spec: dict[str, Any], tmp_path: Path
) -> None:
    calendar = tmp_path / "alex.ics"
    calendar.write_text(ICS)
    admin = await server.key(agent="ops", role="admin")
    bound = await admin.request(
        "PUT", f"/v1/attendees/{ALEX}/calendar", {"provider": "ics", "url": calendar.as_uri()}
    )
    assert bound.status == 200, bound.body[:300]
    alice = await server.key(agent="alice", priority=50)
    boss = await server.key(agent="boss", priority=90)
    held = await _hold(alice, [ALEX], "2030-10-14T10:00:00Z", "wf-held")
    both = await _hold(alice, [ALEX, SAM], "2030-10-14T11:00:00Z", "wf-both")
    assert (await alice.commit(both["id"], both["token"])).status == 200
    gone = await _hold(alice, [SAM], "2030-10-14T12:00:00Z", "wf-gone")
    assert (await alice.release(gone["id"])).status == 200
    low = await _hold(alice, [KIM], "2030-10-14T13:00:00Z", "wf-low")
    high = await _hold(boss, [KIM], "2030-10-14T13:15:00Z", "wf-high")

    browser = await sign_in(server)
    answer = await browser.get(f"/v1/timeline?{DAY}")
    doc = conform(spec, "GET", "/v1/timeline", answer)
    assert doc["truncated"] is False
    rows = {row["emails"][0]: row for row in doc["attendees"]}
    assert set(rows) == {ALEX, SAM, KIM}

    def seen(email: str) -> list[tuple[str, str]]:
        return [(h["id"], h["status"]) for h in rows[email]["holds"]]

    assert seen(ALEX) == [(held["id"], "held"), (both["id"], "committed")]
    assert seen(SAM) == [(both["id"], "committed"), (gone["id"], "released")]
    assert seen(KIM) == [(low["id"], "preempted"), (high["id"], "held")]
    assert rows[KIM]["holds"][0]["preempted_by"] == high["id"]
    alex = rows[ALEX]
    assert alex["external"] == [{"start": "2030-10-14T08:00:00Z", "end": "2030-10-14T09:30:00Z"}]
    assert alex["calendar"] == "ok"
    assert alex["external_as_of"] == bound.json["sync"]["external_as_of"]
    assert "Dentist" not in answer.body.decode()  # busy time only, never what it is
    assert (rows[SAM]["external"], rows[SAM]["calendar"]) == ([], None)


async def test_the_timeline_adds_asked_attendees_and_refuses_a_bad_window(
    server: Server, spec: dict[str, Any]
) -> None:
    reviewer = await server.key(agent="rev", role="reviewer")
    asked = await reviewer.get(f"/v1/timeline?{DAY}&attendee=nobody@example.com,room-7")
    doc = conform(spec, "GET", "/v1/timeline", asked)
    assert [(r["holds"], r["name"]) for r in doc["attendees"]] == [([], None), ([], None)]
    assert "room-7" in {r["id"] for r in doc["attendees"]}
    for query, code in (
        ("from=2030-10-14T00:00:00Z&to=2030-10-29T00:00:01Z", "window_too_long"),
        ("from=2030-10-15T00:00:00Z&to=2030-10-14T00:00:00Z", "invalid_interval"),
        ("from=2030-10-14T00:00:00&to=2030-10-15T00:00:00Z", "naive_datetime"),
        ("to=2030-10-15T00:00:00Z", "missing_field"),
        (f"{DAY}&attendee=not an email <x>", "invalid_attendee"),
        (f"{DAY}&from=2030-10-13T00:00:00Z", "duplicate_field"),
        (f"{DAY}&status=held", "unknown_field"),
    ):
        refused = await reviewer.get(f"/v1/timeline?{query}")
        assert (refused.status, refused.json["code"]) == (422, code), query
        conform(spec, "GET", "/v1/timeline", refused)


async def test_the_workflows_come_busiest_first(server: Server, spec: dict[str, Any]) -> None:
    agent = await server.key()
    for wf, hour, replays in (("wf-calm", 9, 1), ("wf-loop", 10, 4), ("wf-once", 11, 0)):
        for _ in range(replays + 1):
            await _hold(agent, [ALEX], f"2030-10-14T{hour:02d}:00:00Z", wf)
    await server.sweep()  # hands the replay counts to the store
    browser = await sign_in(server)
    listed = conform(spec, "GET", "/v1/workflows", await browser.get("/v1/workflows"))
    assert [(w["workflow_id"], w["replays"]) for w in listed["items"]] == [
        ("wf-loop", 4), ("wf-calm", 1),
    ]  # fmt: skip
    assert listed["items"][0]["last_replay_at"] == "2030-10-01T09:00:00Z"
    assert listed["next_cursor"] is None
    one = await browser.get("/v1/workflows?limit=1")
    assert [w["workflow_id"] for w in one.json["items"]] == ["wf-loop"]
    for bad in ("0", "201", "x"):
        refused = await browser.get(f"/v1/workflows?limit={bad}")
        assert (refused.status, refused.json["code"]) == (422, "invalid_field")
    stranger = await server.key(tenant="globex", agent="x", role="reviewer")
    assert (await stranger.get("/v1/workflows")).json["items"] == []
