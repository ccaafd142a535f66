"""The CalDAV adapter against a real Radicale: idempotent writes, busy reads, failures."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from urllib.parse import quote, urlsplit
from zoneinfo import ZoneInfo

import pytest

from slotward.adapters.providers.caldav import CalDavProvider, caldav_provider
from slotward.engine.calendars import (
    Busy,
    CalendarEvent,
    Connection,
    ProviderSettings,
    ProviderUnreachable,
    Window,
)
from slotward.engine.rules.calendar_events import event_uid
from tests.integration.radicale_fixtures import RADICALE_USERS
from tests.radicale import RadicaleServer, start_radicale, vevent

SETTINGS = ProviderSettings(timeout=5.0, allow_private_urls=True)
WINDOW = Window(datetime(2027, 5, 1, tzinfo=UTC), datetime(2027, 6, 1, tzinfo=UTC))
START = datetime(2027, 5, 10, 9, tzinfo=UTC)
BERLIN = ZoneInfo("Europe/Berlin")


@pytest.fixture
async def provider() -> AsyncIterator[CalDavProvider]:
    adapter = CalDavProvider(SETTINGS)
    yield adapter
    await adapter.close()


@pytest.fixture
def conn(caldav_calendar: str) -> Connection:
    return Connection(caldav_calendar)


def _event(status: str = "TENTATIVE", sequence: int = 1, hold: str = "hold_01") -> CalendarEvent:
    return CalendarEvent(
        uid=event_uid(hold),
        start=START,
        end=START + timedelta(hours=1),
        summary="Held by slotward",
        description="tentative until the agent commits it",
        status=status,  # type: ignore[arg-type]  # a Literal, chosen by the caller
        sequence=sequence,
    )


def _stored(radicale: RadicaleServer, calendar: str, uid: str) -> str:
    body = radicale.get(calendar + quote(uid, safe="") + ".ics")
    assert body is not None
    return body.decode()


# -- writes ---------------------------------------------------------------------


async def test_put_twice_leaves_one_event(
    provider: CalDavProvider, conn: Connection, radicale: RadicaleServer
) -> None:
    event = _event()
    first = await provider.put_event(conn, event)
    again = await provider.put_event(conn, event)
    assert first.ok, first
    assert again.ok, again
    assert radicale.hrefs(conn.url) == [urlsplit(conn.url).path + "hold_01%40slotward.ics"]
    assert _stored(radicale, conn.url, event.uid).count("BEGIN:VEVENT") == 1


async def test_a_put_after_412_reconciles_to_the_newer_state(
    provider: CalDavProvider, conn: Connection, radicale: RadicaleServer
) -> None:
    assert (await provider.put_event(conn, _event("TENTATIVE", 1))).ok
    outcome = await provider.put_event(conn, _event("CONFIRMED", 2))
    assert outcome.ok, outcome
    stored = _stored(radicale, conn.url, event_uid("hold_01"))
    assert "STATUS:CONFIRMED" in stored
    assert "SEQUENCE:2" in stored
    assert len(radicale.hrefs(conn.url)) == 1


async def test_a_stale_put_does_not_overwrite_a_newer_one(
    provider: CalDavProvider, conn: Connection, radicale: RadicaleServer
) -> None:
    assert (await provider.put_event(conn, _event("CONFIRMED", 3))).ok
    stale = await provider.put_event(conn, _event("TENTATIVE", 2))
    assert stale.ok, stale  # nothing left to do: a newer write is there
    stored = _stored(radicale, conn.url, event_uid("hold_01"))
    assert "STATUS:CONFIRMED" in stored
    assert "SEQUENCE:3" in stored


async def test_delete_twice_is_gone_and_ok_both_times(
    provider: CalDavProvider, conn: Connection, radicale: RadicaleServer
) -> None:
    assert (await provider.put_event(conn, _event())).ok
    first = await provider.delete_event(conn, event_uid("hold_01"))
    again = await provider.delete_event(conn, event_uid("hold_01"))
    assert first.ok, first
    assert again.ok, again
    assert radicale.hrefs(conn.url) == []


async def test_a_uid_names_one_member_never_a_path(
    provider: CalDavProvider, conn: Connection, radicale: RadicaleServer
) -> None:
    event = CalendarEvent("../../x/y%2F@slotward", START, START + timedelta(hours=1), "s", "d",
                          "TENTATIVE", 1)  # fmt: skip
    assert (await provider.put_event(conn, event)).ok
    (href,) = radicale.hrefs(conn.url)
    name = href.removeprefix(urlsplit(conn.url).path)
    assert len(name) == 64 + len(".ics")  # its hash: a member of this calendar, never a path
    assert (await provider.put_event(conn, event)).ok
    assert (await provider.delete_event(conn, event.uid)).ok
    assert radicale.hrefs(conn.url) == []


# -- busy -----------------------------------------------------------------------


async def test_an_external_event_blocks_and_own_events_come_back_by_uid(
    provider: CalDavProvider, conn: Connection, radicale: RadicaleServer
) -> None:
    href = radicale.put(conn.url, "ext.ics", vevent("ext-1", START, START + timedelta(hours=2)))
    assert (await provider.put_event(conn, _event())).ok
    read = await provider.busy(conn, WINDOW, None)
    assert read.full
    assert Busy(href, "ext-1", START, START + timedelta(hours=2)) in read.busy
    assert {b.uid for b in read.busy} == {"ext-1", event_uid("hold_01")}


async def test_a_weekly_berlin_event_keeps_its_local_time_across_both_dst_changes(
    provider: CalDavProvider, conn: Connection, radicale: RadicaleServer
) -> None:
    first = datetime(2027, 3, 15, 9, 0)  # a Monday, 09:00 in Berlin
    ics = vevent(
        "weekly", first, first + timedelta(hours=1), tzid="Europe/Berlin", rrule="FREQ=WEEKLY"
    )
    href = radicale.put(conn.url, "weekly.ics", ics)
    window = Window(datetime(2027, 3, 15, tzinfo=UTC), datetime(2027, 11, 8, tzinfo=UTC))
    read = await provider.busy(conn, window, None)
    starts = sorted(b.start for b in read.busy)
    expected = [
        (first + timedelta(weeks=n)).replace(tzinfo=BERLIN).astimezone(UTC) for n in range(34)
    ]
    assert starts == expected
    assert all(b.end - b.start == timedelta(hours=1) and b.source == href for b in read.busy)
    # Written out: CET is UTC+1, CEST (from 28 March to 31 October 2027) UTC+2.
    for day, hour in ((22, 8), (29, 7)):
        assert datetime(2027, 3, day, hour, tzinfo=UTC) in starts
    assert datetime(2027, 10, 25, 7, tzinfo=UTC) in starts
    assert datetime(2027, 11, 1, 8, tzinfo=UTC) in starts


async def test_an_incremental_read_reports_what_changed_and_what_was_removed(
    provider: CalDavProvider, conn: Connection, radicale: RadicaleServer
) -> None:
    radicale.put(conn.url, "a.ics", vevent("a", START, START + timedelta(hours=1)))
    full = await provider.busy(conn, WINDOW, None)
    assert full.full
    assert [b.uid for b in full.busy] == ["a"]

    later = START + timedelta(days=1)
    href = radicale.put(conn.url, "b.ics", vevent("b", later, later + timedelta(hours=1)))
    added = await provider.busy(conn, WINDOW, full.cursor)
    assert not added.full
    assert added.changed == (href,)
    assert added.removed == ()
    assert added.busy == (Busy(href, "b", later, later + timedelta(hours=1)),)

    assert radicale.delete(href) in (200, 204)
    removed = await provider.busy(conn, WINDOW, added.cursor)
    assert not removed.full
    assert removed.removed == (href,)
    assert removed.busy == ()

    quiet = await provider.busy(conn, WINDOW, removed.cursor)
    assert quiet.unchanged
    assert not quiet.full
    assert quiet.busy == ()


async def test_a_changed_event_moving_out_of_the_window_is_changed_with_no_busy(
    provider: CalDavProvider, conn: Connection, radicale: RadicaleServer
) -> None:
    href = radicale.put(conn.url, "a.ics", vevent("a", START, START + timedelta(hours=1)))
    full = await provider.busy(conn, WINDOW, None)
    away = WINDOW.end + timedelta(days=3)
    radicale.put(conn.url, "a.ics", vevent("a", away, away + timedelta(hours=1), sequence=1))
    moved = await provider.busy(conn, WINDOW, full.cursor)
    assert (moved.full, moved.changed, moved.busy) == (False, (href,), ())


async def test_a_cursor_of_another_window_or_a_refused_token_means_a_full_read(
    provider: CalDavProvider, conn: Connection, radicale: RadicaleServer
) -> None:
    radicale.put(conn.url, "a.ics", vevent("a", START, START + timedelta(hours=1)))
    first = await provider.busy(conn, WINDOW, None)
    other = Window(WINDOW.start + timedelta(days=1), WINDOW.end)
    again = await provider.busy(conn, other, first.cursor)
    assert again.full
    assert [b.uid for b in again.busy] == ["a"]

    assert first.cursor is not None
    forged = first.cursor.replace("/sync/", "/sync/0")  # a token Radicale never gave
    refused = await provider.busy(conn, WINDOW, forged)
    assert refused.full
    assert [b.uid for b in refused.busy] == ["a"]
    for junk in ("not json", "{}", '{"token": 3}'):
        assert (await provider.busy(conn, WINDOW, junk)).full


async def test_the_time_range_query_reads_the_same_busy_time(
    provider: CalDavProvider, conn: Connection, radicale: RadicaleServer
) -> None:
    first = datetime(2027, 5, 3, 9, 0)
    weekly = vevent("w", first, first + timedelta(hours=1), tzid="Europe/Berlin",
                    rrule="FREQ=WEEKLY;COUNT=3")  # fmt: skip
    radicale.put(conn.url, "w.ics", weekly)
    radicale.put(conn.url, "a.ics", vevent("a", START, START + timedelta(hours=1)))
    radicale.put(conn.url, "free.ics", vevent("f", START, START + timedelta(hours=1),
                                              transparent=True))  # fmt: skip
    outside = WINDOW.end + timedelta(days=40)
    radicale.put(conn.url, "out.ics", vevent("o", outside, outside + timedelta(hours=1)))
    query_only = CalDavProvider(SETTINGS, use_sync=False)
    try:
        by_query = await query_only.busy(conn, WINDOW, None)
        again = await query_only.busy(conn, WINDOW, by_query.cursor)
    finally:
        await query_only.close()
    by_sync = await provider.busy(conn, WINDOW, None)
    assert by_query.full
    assert again.full  # no token: every read is a full one
    assert set(by_query.busy) == set(by_sync.busy)
    assert sorted(b.uid for b in by_query.busy) == ["a", "w", "w", "w"]


# -- credentials, failures, the SSRF guard ----------------------------------------


async def test_htpasswd_right_password_reads_and_writes(
    provider: CalDavProvider, radicale_htpasswd: RadicaleServer
) -> None:
    calendar = radicale_htpasswd.calendar(user="alice")
    conn = Connection(calendar, "alice", RADICALE_USERS["alice"])
    assert (await provider.put_event(conn, _event())).ok
    read = await provider.busy(conn, WINDOW, None)
    assert [b.uid for b in read.busy] == [event_uid("hold_01")]


async def test_htpasswd_wrong_password_is_refused_without_saying_it(
    provider: CalDavProvider, radicale_htpasswd: RadicaleServer
) -> None:
    calendar = radicale_htpasswd.calendar(user="alice")
    password = "wrong-but-a-secret-all-the-same"
    conn = Connection(calendar, "alice", password)
    with pytest.raises(ProviderUnreachable) as caught:
        await provider.busy(conn, WINDOW, None)
    shown = f"{caught.value} {caught.value!r} {caught.value.args}"
    assert "credentials refused" in shown
    assert password not in shown
    outcome = await provider.put_event(conn, _event())
    assert not outcome.ok
    assert outcome.status == 401
    assert password not in repr(outcome)
    assert password not in repr(conn)


@pytest.fixture
def own_radicale() -> Iterator[RadicaleServer]:
    with start_radicale() as server:
        yield server


async def test_a_stopped_server_is_unreachable_at_once_and_back_after_restart(
    provider: CalDavProvider, own_radicale: RadicaleServer
) -> None:
    conn = Connection(own_radicale.calendar())
    assert (await provider.put_event(conn, _event())).ok
    own_radicale.stop()
    # Refused, not timed out: a timeout's message says "timed out after".
    with pytest.raises(ProviderUnreachable, match="connection failed"):
        await provider.busy(conn, WINDOW, None)
    outcome = await provider.put_event(conn, _event("CONFIRMED", 2))
    assert (outcome.ok, outcome.status) == (False, None)
    assert outcome.error is not None
    assert "connection failed" in outcome.error

    own_radicale.restart()
    assert (await provider.put_event(conn, _event("CONFIRMED", 2))).ok
    read = await provider.busy(conn, WINDOW, None)
    assert [b.uid for b in read.busy] == [event_uid("hold_01")]


async def test_a_killed_server_is_unreachable(own_radicale: RadicaleServer) -> None:
    conn = Connection(own_radicale.calendar())
    own_radicale.kill()
    adapter = caldav_provider(SETTINGS)
    try:
        with pytest.raises(ProviderUnreachable):
            await adapter.busy(conn, WINDOW, None)
        assert (await adapter.delete_event(conn, event_uid("hold_01"))).status is None
    finally:
        await adapter.close()


@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
async def test_a_private_address_is_refused_unless_allowed(
    radicale: RadicaleServer, caldav_calendar: str, host: str
) -> None:
    conn = Connection(caldav_calendar.replace("127.0.0.1", host))
    guarded = caldav_provider(ProviderSettings(timeout=5.0, allow_private_urls=False))
    try:
        with pytest.raises(ProviderUnreachable, match="url_not_allowed"):
            await guarded.busy(conn, WINDOW, None)
        outcome = await guarded.put_event(conn, _event())
        assert outcome.status is None
        assert outcome.error is not None
        assert "url_not_allowed" in outcome.error
    finally:
        await guarded.close()
    assert radicale.hrefs(caldav_calendar) == []


def test_the_adapter_says_what_it_can_do() -> None:
    adapter = caldav_provider(ProviderSettings())
    assert adapter.name == "caldav"
    caps = adapter.capabilities
    assert (caps.writes, caps.credentials, caps.incremental) == (True, True, True)
    assert caps.schemes == ("https", "http")
