"""Calendar providers end to end: slotward's own events in a real Radicale, and
external time from it in every decision.

The server is the production app in process (relay, calendar writer, sync
worker and sweeper running) on the real clock, over real HTTP; the calendar is
a real Radicale (tests/radicale.py), read and changed past slotward with plain
HTTP. Every decision reads the calendars again (SLOTWARD_PROVIDER_MAX_STALENESS
=0) unless a test is about the sync worker. Waits poll with a deadline. Every
scenario runs on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from functools import partial

from sqlalchemy import Engine

from tests.e2e.calendars import (
    WITHIN,
    Calendared,
    GatedProxy,
    agent_key,
    by_uid,
    calendar_when,
    calendared,
    dav_calendar_fixture,  # noqa: F401  (a fixture: found by name)
    dav_fixture,  # noqa: F401  (a fixture: found by name)
    eventually,
    radicale_events,
    uid,
)
from tests.radicale import RadicaleServer, vevent

ALEX = "alex@example.com"


def _at(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


async def _bind(s: Calendared, calendar: str, attendee: str = ALEX) -> dict[str, object]:
    doc = await s.bind(attendee, {"provider": "caldav", "url": calendar})
    assert doc["sync"]["status"] == "ok", doc
    return doc


def _overlaps(slot: dict[str, str], start: str, end: str) -> bool:
    return _at(slot["start"]) < _at(end) and _at(start) < _at(slot["end"])


async def test_a_holds_event_is_tentative_confirmed_and_deleted_with_it(
    database: tuple[str, Engine], dav: RadicaleServer, dav_calendar: str
) -> None:
    cal = dav_calendar
    async with calendared(database) as s:
        await _bind(s, cal)
        # The shortest hold a claim may ask for: it expires while the rest runs.
        expiring = await s.hold(ALEX, "2030-10-14T17:00:00Z", hold_ttl_seconds=10)
        held = await s.hold(ALEX, "2030-10-14T14:00:00Z")
        events = await calendar_when(dav, cal, lambda e: uid(held) in e)
        event = events[uid(held)]
        assert event.status == "TENTATIVE"
        assert event.summary == "Strategy Sync with Alex"
        assert "agent-1" in event.description
        assert held["expires_at"] in event.description
        assert (event.start, event.end) == (_at(held["start"]), _at(held["end"]))

        done = await s.agent.commit(held["id"], held["token"])  # its own event is no conflict
        assert done.status == 200, done.json
        await calendar_when(dav, cal, lambda e: e[uid(held)].status == "CONFIRMED")

        released = await s.agent.release(held["id"])
        assert released.status == 200, released.json
        await calendar_when(dav, cal, lambda e: uid(held) not in e)

        low = await s.hold(ALEX, "2030-10-14T15:00:00Z")
        await calendar_when(dav, cal, lambda e: uid(low) in e)
        assert s.services is not None
        boss = s.client(await agent_key(s.services, "agent-boss", 90))
        # Another intent (another span) of a higher priority: it preempts.
        high = await s.claim(ALEX, "2030-10-14T15:15:00Z", by=boss, title="Board prep")
        assert high.status == 201, high.json
        assert (await s.agent.get(f"/v1/holds/{low['id']}")).json["status"] == "preempted"
        events = await calendar_when(dav, cal, lambda e: uid(low) not in e and uid(high.json) in e)
        assert events[uid(high.json)].summary == "Board prep"
        assert "agent-boss" in events[uid(high.json)].description

        events = await calendar_when(dav, cal, lambda e: uid(expiring) not in e)
        assert (await s.agent.get(f"/v1/holds/{expiring['id']}")).json["status"] == "expired"
        assert set(events) == {uid(high.json)}
        # The writer records an outcome just after the calendar answered it: wait
        # for the record, do not race it (this once failed under load).
        await eventually(partial(s.settled, ALEX), WITHIN, lambda: "writes still pending")


async def test_an_external_event_blocks_a_claim_until_it_is_deleted(
    database: tuple[str, Engine], dav: RadicaleServer, dav_calendar: str
) -> None:
    cal = dav_calendar
    dentist = dav.put(
        cal, "dentist.ics",
        vevent("dentist-1@example.com", _at("2030-10-14T14:00:00Z"), _at("2030-10-14T15:00:00Z")),
    )  # fmt: skip
    async with calendared(database) as s:
        alex = await _bind(s, cal)
        before = datetime.now(UTC)
        refused = await s.claim(ALEX, "2030-10-14T14:30:00Z")
        assert refused.status == 409, refused.json
        problem = refused.json
        assert problem["code"] == "slot_conflict"
        assert problem["conflicts"] == [
            {"attendee": alex["attendee"], "start": "2030-10-14T14:00:00Z",
             "end": "2030-10-14T15:00:00Z", "kind": "external"},
        ]  # fmt: skip
        # Read for this claim (the staleness bound is 0): as of a moment in it.
        assert before <= _at(problem["external_as_of"]) <= datetime.now(UTC)
        assert problem["alternatives"], problem
        for slot in problem["alternatives"]:
            assert not _overlaps(slot, "2030-10-14T14:00:00Z", "2030-10-14T15:00:00Z"), slot
        nearest = await s.claim(ALEX, problem["alternatives"][0]["start"])
        assert nearest.status == 201, nearest.json  # an alternative is free

        assert await asyncio.to_thread(dav.delete, dentist) in (200, 204)
        made = await s.claim(ALEX, "2030-10-14T14:30:00Z")
        assert made.status == 201, made.json
        assert before <= _at(made.json["external_as_of"]) <= datetime.now(UTC)


async def test_the_sync_worker_frees_a_slot_whose_event_was_deleted(
    database: tuple[str, Engine], dav: RadicaleServer, dav_calendar: str
) -> None:
    cal = dav_calendar
    dentist = dav.put(
        cal, "dentist.ics",
        vevent("dentist-2@example.com", _at("2030-10-14T14:00:00Z"), _at("2030-10-14T15:00:00Z")),
    )  # fmt: skip
    # Decisions take the mirror as it is for an hour: only the sync worker reads.
    async with calendared(database, provider_max_staleness_seconds=3600.0) as s:
        await _bind(s, cal)
        # The first claim so far ahead reads the calendar (the mirror did not reach 2030).
        refused = await s.claim(ALEX, "2030-10-14T14:00:00Z")
        assert refused.status == 409, refused.json
        assert {c["kind"] for c in refused.json["conflicts"]} == {"external"}
        assert await asyncio.to_thread(dav.delete, dentist) in (200, 204)
        deleted = datetime.now(UTC)

        async def read_since() -> bool:
            sync = (await s.binding(ALEX))["sync"]
            return sync["status"] == "ok" and _at(sync["external_as_of"]) > deleted

        await eventually(read_since, WITHIN, lambda: "the sync worker never read again")
        made = await s.claim(ALEX, "2030-10-14T14:00:00Z")
        assert made.status == 201, made.json
        assert _at(made.json["external_as_of"]) > deleted  # decided on the worker's read


async def test_commit_reads_again_and_only_external_time_refuses_it(
    database: tuple[str, Engine], dav: RadicaleServer, dav_calendar: str
) -> None:
    cal = dav_calendar
    async with calendared(database) as s:
        alex = await _bind(s, cal)
        held = await s.hold(ALEX, "2030-10-14T14:00:00Z")
        await calendar_when(dav, cal, lambda e: e.get(uid(held), None) is not None)
        # slotward's own tentative event is in the calendar: it blocks as the hold
        # it is, never as external time.
        other = await s.claim(ALEX, "2030-10-14T14:00:00Z", title="Another meeting")
        assert other.status == 409, other.json
        assert [c["kind"] for c in other.json["conflicts"]] == ["held"]

        late = vevent("late-1@example.com", _at("2030-10-14T14:15:00Z"),
                      _at("2030-10-14T14:45:00Z"))  # fmt: skip
        await asyncio.to_thread(dav.put, cal, "late.ics", late)
        refused = await s.agent.commit(held["id"], held["token"])
        assert refused.status == 409, refused.json
        assert refused.json["code"] == "slot_conflict"
        assert refused.json["conflicts"] == [
            {"attendee": alex["attendee"], "start": "2030-10-14T14:15:00Z",
             "end": "2030-10-14T14:45:00Z", "kind": "external"},
        ]  # fmt: skip
        assert "external_as_of" in refused.json
        assert (await s.agent.get(f"/v1/holds/{held['id']}")).json["status"] == "held"

        # Without the external event, the same commit goes through.
        [late_href] = [e.resource for e in (await radicale_events(dav, cal))
                       if e.uid == "late-1@example.com"]  # fmt: skip
        assert await asyncio.to_thread(dav.delete, late_href) in (200, 204)
        done = await s.agent.commit(held["id"], held["token"])
        assert done.status == 200, done.json
        events = await calendar_when(dav, cal, lambda e: e[uid(held)].status == "CONFIRMED")
        assert set(events) == {uid(held)}


async def test_a_hold_placed_before_the_binding_is_written_once_bound(
    database: tuple[str, Engine], dav: RadicaleServer, dav_calendar: str
) -> None:
    cal = dav_calendar
    async with calendared(database) as s:
        held = await s.hold(ALEX, "2030-10-14T14:00:00Z")
        await _bind(s, cal)
        events = await calendar_when(dav, cal, lambda e: uid(held) in e)
        assert events[uid(held)].status == "TENTATIVE"
        await eventually(partial(s.settled, ALEX), WITHIN)
        assert set(by_uid(await radicale_events(dav, cal))) == {uid(held)}


async def test_a_claim_whose_read_loses_to_the_sync_worker_reads_again(
    database: tuple[str, Engine], dav: RadicaleServer, dav_calendar: str
) -> None:
    """The claim's read (over a window reaching its span) is slow; meanwhile the
    sync worker stores a read of the mirror's narrower window first. The claim
    must not decide on that mirror, which does not reach 2030."""
    await asyncio.to_thread(
        dav.put, dav_calendar, "dentist.ics",
        vevent("dentist-5@example.com", _at("2030-10-14T14:00:00Z"), _at("2030-10-14T15:00:00Z")),
    )  # fmt: skip
    async with (
        GatedProxy(dav.url.rstrip("/")).running() as proxy,
        calendared(database, provider_max_staleness_seconds=3600.0) as s,
    ):
        await _bind(s, proxy.url(dav_calendar))
        # The claim's calendar-query: its window ends where the claim's day does.
        proxy.hold_report = b'end="20301015T000000Z"'
        claim = asyncio.create_task(s.claim(ALEX, "2030-10-14T14:00:00Z"))
        await asyncio.wait_for(proxy.report_held.wait(), WITHIN)
        held_at = datetime.now(UTC)

        async def worker_stored() -> bool:
            sync = (await s.binding(ALEX))["sync"]
            return _at(sync["external_as_of"]) > held_at

        await eventually(worker_stored, WITHIN, lambda: "the sync worker never read")
        proxy.report_gate.set()  # the claim's read stores now, and loses the race
        refused = await asyncio.wait_for(claim, WITHIN)
        assert refused.status == 409, refused.json
        assert [c["kind"] for c in refused.json["conflicts"]] == ["external"]
