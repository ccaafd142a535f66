"""Calendar providers end to end: local time across DST, and a calendar that goes away.

A weekly 09:00 meeting in Europe/Berlin blocks 08:00Z in winter and 07:00Z in
summer, read from an ICS file a real aiohttp server serves and from a real
Radicale. A Radicale that is stopped refuses claims of attendees whose binding
fails closed (503 provider_unavailable, Retry-After), lets those of
``last_known`` bindings decide on the mirror (``external_stale``), and gets
the writes queued meanwhile, once each, when it is back. The server is the
production app in process on the real clock; both stores.
"""

from __future__ import annotations

import asyncio
from datetime import datetime

import aiohttp
from sqlalchemy import Engine

from tests.e2e.calendars import (
    WITHIN,
    IcsServer,
    by_uid,
    calendar_when,
    calendared,
    dav_calendar_fixture,  # noqa: F401  (a fixture: found by name)
    dav_fixture,  # noqa: F401  (a fixture: found by name)
    eventually,
    radicale_events,
    uid,
)
from tests.e2e.test_metrics import parse_metrics
from tests.radicale import RadicaleServer, start_radicale, vevent

ALEX = "alex@example.com"
BLAIR = "blair@example.com"

# 09:00-10:00 Berlin time every Monday from 4 March 2030; Berlin moves to CEST
# on 31 March and back to CET on 27 October.
WEEKLY = vevent(
    "weekly-standup@example.com",
    datetime(2030, 3, 4, 9, 0),
    datetime(2030, 3, 4, 10, 0),
    tzid="Europe/Berlin",
    rrule="FREQ=WEEKLY;COUNT=52",
    summary="Weekly standup",
)
# (claim start, the instance it meets, or None when the hour is free)
CLAIMS = [
    ("2030-03-25T08:00:00Z", ("2030-03-25T08:00:00Z", "2030-03-25T09:00:00Z")),  # CET
    ("2030-03-25T07:00:00Z", None),
    ("2030-04-01T07:00:00Z", ("2030-04-01T07:00:00Z", "2030-04-01T08:00:00Z")),  # CEST
    ("2030-04-01T08:00:00Z", None),
    ("2030-10-21T07:00:00Z", ("2030-10-21T07:00:00Z", "2030-10-21T08:00:00Z")),  # CEST
    ("2030-10-21T08:00:00Z", None),
    ("2030-10-28T08:00:00Z", ("2030-10-28T08:00:00Z", "2030-10-28T09:00:00Z")),  # CET
    ("2030-10-28T07:00:00Z", None),
]


async def test_a_weekly_berlin_event_blocks_its_local_hour_across_dst(
    database: tuple[str, Engine], dav: RadicaleServer, dav_calendar: str
) -> None:
    await asyncio.to_thread(dav.put, dav_calendar, "weekly.ics", WEEKLY)
    async with IcsServer(WEEKLY).running() as ics, calendared(database) as s:
        # Alex's calendar is an ICS file over HTTP, Blair's a CalDAV collection.
        alex = await s.bind(ALEX, {"provider": "ics", "url": ics.url("alex.ics")})
        blair = await s.bind(BLAIR, {"provider": "caldav", "url": dav_calendar})
        assert (alex["sync"]["status"], blair["sync"]["status"]) == ("ok", "ok"), (alex, blair)
        for who, doc in ((ALEX, alex), (BLAIR, blair)):
            for start, meets in CLAIMS:
                answer = await s.claim(who, start, minutes=30)
                if meets is None:
                    assert answer.status == 201, (who, start, answer.json)
                    continue
                assert answer.status == 409, (who, start, answer.json)
                assert answer.json["conflicts"] == [
                    {"attendee": doc["attendee"], "start": meets[0], "end": meets[1],
                     "kind": "external"},
                ], (who, start)  # fmt: skip
        assert ics.gets >= len(CLAIMS)  # every claim read the file again
        # Blair's free hours are slotward's own events in the same calendar now:
        # they never blocked the claims after them.
        events = await calendar_when(dav, dav_calendar, lambda e: len(e) == 1 + len(CLAIMS) // 2)
        assert sorted(e.status or "" for e in events.values()) == ["", *["TENTATIVE"] * 4]


async def _writes_failed(base: str) -> bool:
    """Whether the server's writer has recorded a failed calendar write."""
    async with aiohttp.ClientSession() as session, session.get(base + "/metrics") as resp:
        samples = parse_metrics(await resp.text())
    return samples[("slotward_calendar_writes_total", frozenset({("outcome", "failed")}))] > 0


async def test_a_stopped_radicale_fails_closed_or_decides_on_the_last_read(
    database: tuple[str, Engine],
) -> None:
    with await asyncio.to_thread(start_radicale) as dav:
        alex_cal, blair_cal = dav.calendar(), dav.calendar()
        dav.put(blair_cal, "dentist.ics", vevent(
            "dentist-3@example.com", datetime.fromisoformat("2030-10-15T10:00:00+00:00"),
            datetime.fromisoformat("2030-10-15T11:00:00+00:00"),
        ))  # fmt: skip
        async with calendared(database) as s:
            await s.bind(ALEX, {"provider": "caldav", "url": alex_cal})
            await s.bind(BLAIR, {"provider": "caldav", "url": blair_cal,
                                 "on_unavailable": "last_known"})  # fmt: skip
            # A claim while it is up: the mirror now reaches October 2030.
            seen = await s.claim(BLAIR, "2030-10-15T10:00:00Z")
            assert seen.status == 409, seen.json
            assert "external_stale" not in seen.json

            await asyncio.to_thread(dav.stop)
            refused = await s.claim(ALEX, "2030-10-14T14:00:00Z")
            assert refused.status == 503, refused.json
            assert refused.json["code"] == "provider_unavailable"
            assert refused.json["retryable"] is True
            assert int(refused.headers["Retry-After"]) >= 1

            made = await s.claim(BLAIR, "2030-10-14T14:00:00Z")
            assert made.status == 201, made.json
            assert made.json["external_stale"] is True
            assert made.json["external_as_of"] is not None
            still = await s.claim(BLAIR, "2030-10-15T10:30:00Z")  # the mirror's event
            assert still.status == 409, still.json
            assert still.json["external_stale"] is True
            assert [c["kind"] for c in still.json["conflicts"]] == ["external"]
            done = await s.agent.commit(made.json["id"], made.json["token"])
            assert done.status == 200, done.json
            gone = await s.hold(BLAIR, "2030-10-14T16:00:00Z")
            assert (await s.agent.release(gone["id"])).status == 200

            # The writer tried while Radicale was down, and keeps the writes.
            await eventually(lambda: _writes_failed(s.base), WITHIN, lambda: "no write failed")
            writes = (await s.binding(BLAIR))["sync"]["writes"]
            # At least the committed hold's (the released one's may be coalesced away).
            assert writes["pending"] >= 1, writes
            assert writes["dead"] == 0, writes

            await asyncio.to_thread(dav.start)  # the same port and storage
            await eventually(lambda: s.settled(BLAIR), WITHIN, lambda: "writes still pending")
            events = await calendar_when(dav, blair_cal, lambda e: uid(made.json) in e)
            assert events[uid(made.json)].status == "CONFIRMED"
            assert set(events) == {uid(made.json), "dentist-3@example.com"}
            assert by_uid(await radicale_events(dav, alex_cal)) == {}

            answer = await s.claim(ALEX, "2030-10-14T14:00:00Z")
            assert answer.status == 201, answer.json  # read again once it is back
            assert "external_stale" not in answer.json
