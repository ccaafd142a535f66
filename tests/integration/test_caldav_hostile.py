"""The CalDAV adapter against a hostile or failing server (a real aiohttp app on 127.0.0.1).

Radicale is well-behaved; these are the answers it never gives: an XML bomb,
an answer past the cap, no sync-collection, a 503 with Retry-After, a
redirect, a server too slow to answer, an ETag that never matches.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from slotward.adapters.providers import caldav
from slotward.adapters.providers.caldav import CalDavProvider
from slotward.engine.calendars import (
    CalendarEvent,
    CalendarInvalid,
    Connection,
    ProviderSettings,
    ProviderUnreachable,
    Window,
)
from tests.radicale import vevent

WINDOW = Window(datetime(2027, 5, 1, tzinfo=UTC), datetime(2027, 6, 1, tzinfo=UTC))
START = datetime(2027, 5, 10, 9, tzinfo=UTC)
PASSWORD = "a-password-nobody-may-see"
EVENT = CalendarEvent(
    "hold_01@slotward", START, START + timedelta(hours=1), "s", "d", "CONFIRMED", 2
)

_BOMB = b"""<?xml version="1.0"?>
<!DOCTYPE lolz [<!ENTITY lol "lol"><!ENTITY lol2 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
<!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">]>
<D:multistatus xmlns:D="DAV:"><D:response><D:href>&lol3;</D:href></D:response></D:multistatus>"""


def _multistatus(*members: tuple[str, bytes]) -> bytes:
    parts = "".join(
        f'<D:response><D:href>{href}</D:href><D:propstat><D:prop><D:getetag>"1"</D:getetag>'
        f"<C:calendar-data>{data.decode()}</C:calendar-data></D:prop>"
        "<D:status>HTTP/1.1 200 OK</D:status></D:propstat></D:response>"
        for href, data in members
    )
    return (
        '<?xml version="1.0"?><D:multistatus xmlns:D="DAV:" '
        f'xmlns:C="urn:ietf:params:xml:ns:caldav">{parts}</D:multistatus>'
    ).encode()


@dataclass
class Calendar:
    url: str = ""
    seen: list[tuple[str, str, str | None]] = field(default_factory=list)


def _app(calendar: Calendar) -> web.Application:
    event = vevent("ext", START, START + timedelta(hours=1))

    async def handle(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        kind = request.match_info["kind"]
        calendar.seen.append((request.method, kind, request.headers.get("Authorization")))
        sync = b"sync-collection" in body
        if kind == "bomb":
            return web.Response(status=207, body=_BOMB, content_type="application/xml")
        if kind == "huge":
            return web.Response(status=207, body=b" " * 8192 + _multistatus())
        if kind == "nosync":
            if sync:
                return web.Response(status=501)
            return web.Response(status=207, body=_multistatus(("/nosync/ext.ics", event)))
        if kind == "busy":
            return web.Response(status=503, headers={"Retry-After": "30"})
        if kind == "redirect":
            raise web.HTTPFound("/elsewhere/")
        if kind == "slow":
            await asyncio.sleep(3)  # longer than the adapter's timeout: the point here
            return web.Response(status=207, body=_multistatus())
        if kind == "racing":  # every If-None-Match and If-Match fails: always "changed"
            if request.method == "GET":
                return web.Response(body=event, headers={"ETag": f'"{len(calendar.seen)}"'})
            return web.Response(status=412)
        return web.Response(status=404)

    app = web.Application()
    app.router.add_route("*", "/{kind}/{rest:.*}", handle)
    return app


@pytest.fixture
async def server() -> AsyncIterator[Calendar]:
    calendar = Calendar()
    test_server = TestServer(_app(calendar), host="127.0.0.1")
    await test_server.start_server()
    calendar.url = f"http://127.0.0.1:{test_server.port}"
    try:
        yield calendar
    finally:
        await test_server.close()


@pytest.fixture
async def provider() -> AsyncIterator[CalDavProvider]:
    adapter = CalDavProvider(ProviderSettings(timeout=0.5, allow_private_urls=True))
    yield adapter
    await adapter.close()


def _conn(server: Calendar, kind: str) -> Connection:
    return Connection(f"{server.url}/{kind}/", "alice", PASSWORD)


async def test_an_xml_bomb_is_refused_unexpanded(
    provider: CalDavProvider, server: Calendar
) -> None:
    with pytest.raises(CalendarInvalid, match="not well-formed XML"):
        await provider.busy(_conn(server, "bomb"), WINDOW, None)


async def test_an_answer_past_the_cap_is_not_read(
    provider: CalDavProvider, server: Calendar, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(caldav, "MAX_ANSWER", 4096)
    with pytest.raises(ProviderUnreachable, match="larger than 4 KiB"):
        await provider.busy(_conn(server, "huge"), WINDOW, None)


async def test_no_sync_collection_falls_back_to_the_time_range_query(
    provider: CalDavProvider, server: Calendar
) -> None:
    read = await provider.busy(_conn(server, "nosync"), WINDOW, None)
    assert read.full
    assert [(b.source, b.uid, b.start) for b in read.busy] == [("/nosync/ext.ics", "ext", START)]
    again = await provider.busy(_conn(server, "nosync"), WINDOW, read.cursor)
    assert again.full
    assert again.busy == read.busy


async def test_a_503_carries_its_retry_after(provider: CalDavProvider, server: Calendar) -> None:
    with pytest.raises(ProviderUnreachable) as caught:
        await provider.busy(_conn(server, "busy"), WINDOW, None)
    assert caught.value.retry_after == 30.0
    outcome = await provider.put_event(_conn(server, "busy"), EVENT)
    assert (outcome.ok, outcome.status, outcome.retry_after) == (False, 503, 30.0)


async def test_a_redirect_is_not_followed(provider: CalDavProvider, server: Calendar) -> None:
    with pytest.raises(ProviderUnreachable, match="302"):
        await provider.busy(_conn(server, "redirect"), WINDOW, None)
    outcome = await provider.delete_event(_conn(server, "redirect"), EVENT.uid)
    assert (outcome.ok, outcome.status) == (False, 302)
    assert [kind for _, kind, _ in server.seen] == ["redirect", "redirect"]  # never /elsewhere/


async def test_a_server_too_slow_times_out(provider: CalDavProvider, server: Calendar) -> None:
    with pytest.raises(ProviderUnreachable, match=r"timed out after 0\.5 s"):
        await provider.busy(_conn(server, "slow"), WINDOW, None)
    outcome = await provider.put_event(_conn(server, "slow"), EVENT)
    assert outcome.status is None
    assert outcome.error == "timed out after 0.5 s"


async def test_a_put_that_keeps_racing_gives_up_after_a_bounded_number_of_tries(
    provider: CalDavProvider, server: Calendar
) -> None:
    outcome = await provider.put_event(_conn(server, "racing"), EVENT)
    assert not outcome.ok
    assert outcome.status == 412
    puts = [method for method, _, _ in server.seen if method == "PUT"]
    assert len(puts) == 1 + caldav.RECONCILE_TRIES


async def test_no_password_in_any_log_line_or_error(
    provider: CalDavProvider, server: Calendar, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    shown: list[str] = []
    for kind in ("bomb", "busy", "redirect", "slow", "nosync", "missing"):
        try:
            await provider.busy(_conn(server, kind), WINDOW, None)
        except Exception as exc:
            shown.append(f"{exc} {exc!r}")
        shown.append(repr(await provider.put_event(_conn(server, kind), EVENT)))
    assert all(auth is not None and auth.startswith("Basic ") for _, _, auth in server.seen)
    text = " ".join(shown) + caplog.text
    assert PASSWORD not in text
    assert "Basic " not in text
    assert "Authorization" not in text


async def test_a_url_with_credentials_in_it_is_refused_without_showing_them(
    provider: CalDavProvider, server: Calendar
) -> None:
    conn = Connection(server.url.replace("://", f"://alice:{PASSWORD}@") + "/nosync/")
    with pytest.raises(ProviderUnreachable, match="invalid_url") as caught:
        await provider.busy(conn, WINDOW, None)
    assert PASSWORD not in f"{caught.value!r}"
    outcome = await provider.put_event(conn, EVENT)
    assert outcome.status is None
    assert PASSWORD not in repr(outcome)
    assert server.seen == []
