"""The ics provider against a real aiohttp server on 127.0.0.1, and a real file.

The server is a plain aiohttp app serving one calendar with an ETag and a
Last-Modified, honouring If-None-Match and If-Modified-Since; it records what
reached it, so "refused" means never hit.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from slotward.adapters.providers.ical import MAX_BYTES
from slotward.adapters.providers.ics import IcsProvider, ics_provider
from slotward.engine.calendars import (
    Busy,
    CalendarEvent,
    CalendarInvalid,
    Connection,
    ProviderSettings,
    ProviderUnreachable,
    Window,
)

WINDOW = Window(datetime(2030, 3, 18, tzinfo=UTC), datetime(2030, 4, 8, tzinfo=UTC))
LATER = Window(datetime(2030, 4, 8, tzinfo=UTC), datetime(2030, 4, 29, tzinfo=UTC))
MODIFIED = datetime(2030, 3, 1, 12, tzinfo=UTC)


def ics(*events: tuple[str, str, str]) -> bytes:
    """A calendar of (uid, start, end) events, the times in UTC (20300320T100000Z)."""
    body = "".join(
        f"BEGIN:VEVENT\r\nUID:{uid}\r\nDTSTAMP:20300101T000000Z\r\n"
        f"DTSTART:{start}\r\nDTEND:{end}\r\nEND:VEVENT\r\n"
        for uid, start, end in events
    )
    return (
        f"BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//test//EN\r\n{body}END:VCALENDAR\r\n".encode()
    )


WEEKLY = (
    b"BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//test//EN\r\nBEGIN:VEVENT\r\nUID:weekly\r\n"
    b"DTSTAMP:20300101T000000Z\r\nDTSTART;TZID=Europe/Berlin:20300107T090000\r\n"
    b"DTEND;TZID=Europe/Berlin:20300107T100000\r\nRRULE:FREQ=WEEKLY\r\nEND:VEVENT\r\n"
    b"END:VCALENDAR\r\n"
)


@dataclass
class Server:
    base: str
    port: int
    body: bytes = WEEKLY
    version: int = 1
    hits: list[tuple[str, dict[str, str]]] = field(default_factory=list)
    sent: int = 0  # bytes of /endless written

    def set(self, body: bytes) -> None:
        self.body = body
        self.version += 1

    def url(self, path: str) -> str:
        return f"{self.base}{path}"


def _app(server: list[Server]) -> web.Application:
    async def calendar(request: web.Request) -> web.StreamResponse:
        state = server[0]
        state.hits.append((request.path, dict(request.headers)))
        etag = f'"v{state.version}"'
        modified = format_datetime(MODIFIED + timedelta(hours=state.version), usegmt=True)
        headers = {"ETag": etag, "Last-Modified": modified}
        if request.headers.get("If-None-Match") == etag:
            return web.Response(status=304, headers=headers)
        return web.Response(body=state.body, headers=headers, content_type="text/calendar")

    async def other(request: web.Request) -> web.StreamResponse:
        state = server[0]
        state.hits.append((request.path, dict(request.headers)))
        name = request.match_info["name"]
        if name == "fail":
            return web.Response(status=500, text="boom")
        if name == "missing":
            return web.Response(status=404)
        if name == "busy":
            return web.Response(status=503, headers={"Retry-After": "120"})
        if name == "slow":
            await asyncio.sleep(5)
            return web.Response(body=WEEKLY)
        if name == "redirect":
            raise web.HTTPFound("/cal.ics")
        if name == "redirect-metadata":
            raise web.HTTPFound("http://169.254.169.254/latest/meta-data")
        if name == "redirect-file":
            raise web.HTTPFound("file:///etc/passwd")
        if name == "redirect-loop":
            raise web.HTTPFound("/x/redirect-loop")
        if name == "declared-big":
            response = web.StreamResponse(headers={"Content-Length": str(MAX_BYTES + 1)})
            await response.prepare(request)
            await response.write(b"BEGIN:VCALENDAR\r\n")
            return response
        if name == "endless":
            response = web.StreamResponse()
            response.enable_chunked_encoding()
            await response.prepare(request)
            chunk = b"X-FILLER:" + b"x" * 65_000 + b"\r\n"
            try:
                for _ in range(10 * MAX_BYTES // len(chunk)):
                    await response.write(chunk)
                    state.sent += len(chunk)
            except (ConnectionResetError, ConnectionError):
                pass
            return response
        if name == "huge-etag":
            return web.Response(body=WEEKLY, headers={"ETag": '"' + "e" * 4000 + '"'})
        if name == "garbage":
            return web.Response(body=b"<html>not a calendar</html>")
        raise web.HTTPNotFound()

    app = web.Application()
    app.router.add_get("/cal.ics", calendar)
    app.router.add_get("/private-token123/cal.ics", calendar)
    app.router.add_get("/x/{name}", other)
    return app


@pytest.fixture
async def server() -> AsyncIterator[Server]:
    holder: list[Server] = []
    test_server = TestServer(_app(holder), host="127.0.0.1")
    await test_server.start_server()
    port = test_server.port
    assert port is not None
    holder.append(Server(base=f"http://127.0.0.1:{port}", port=port))
    try:
        yield holder[0]
    finally:
        await test_server.close()


@pytest.fixture
async def provider() -> AsyncIterator[IcsProvider]:
    made = ics_provider(ProviderSettings(timeout=1.0, allow_private_urls=True))
    try:
        yield made
    finally:
        await made.close()


def conn(url: str) -> Connection:
    return Connection(url=url, timezone="Europe/Berlin")


def starts(busy: tuple[Busy, ...]) -> list[datetime]:
    return [b.start for b in busy]


SPRING_MONDAYS = [
    datetime(2030, 3, 18, 8, tzinfo=UTC),
    datetime(2030, 3, 25, 8, tzinfo=UTC),
    datetime(2030, 4, 1, 7, tzinfo=UTC),
]


# -- conditional GET ---------------------------------------------------------------------


async def test_a_first_read_is_full_and_a_second_is_unchanged(
    server: Server, provider: IcsProvider
) -> None:
    first = await provider.busy(conn(server.url("/cal.ics")), WINDOW, None)
    assert first.full
    assert not first.unchanged
    assert starts(first.busy) == SPRING_MONDAYS
    assert {b.source for b in first.busy} == {"weekly"}
    second = await provider.busy(conn(server.url("/cal.ics")), WINDOW, first.cursor)
    assert second.full
    assert second.unchanged
    assert second.busy == ()
    assert second.cursor == first.cursor
    (_, asked), (_, again) = server.hits
    assert "If-None-Match" not in asked
    assert again["If-None-Match"] == '"v1"'
    assert again["If-Modified-Since"] == format_datetime(MODIFIED + timedelta(hours=1), usegmt=True)


async def test_a_changed_calendar_is_read_again(server: Server, provider: IcsProvider) -> None:
    first = await provider.busy(conn(server.url("/cal.ics")), WINDOW, None)
    server.set(ics(("new", "20300320T100000Z", "20300320T110000Z")))
    second = await provider.busy(conn(server.url("/cal.ics")), WINDOW, first.cursor)
    assert not second.unchanged
    assert [(b.uid, b.start) for b in second.busy] == [
        ("new", datetime(2030, 3, 20, 10, tzinfo=UTC))
    ]
    assert second.cursor != first.cursor
    third = await provider.busy(conn(server.url("/cal.ics")), WINDOW, second.cursor)
    assert third.unchanged


async def test_a_cursor_of_another_window_fetches_unconditionally(
    server: Server, provider: IcsProvider
) -> None:
    first = await provider.busy(conn(server.url("/cal.ics")), WINDOW, None)
    later = await provider.busy(conn(server.url("/cal.ics")), LATER, first.cursor)
    assert not later.unchanged
    assert starts(later.busy) == [datetime(2030, 4, d, 7, tzinfo=UTC) for d in (8, 15, 22)]
    assert "If-None-Match" not in server.hits[-1][1]
    assert "If-Modified-Since" not in server.hits[-1][1]


async def test_an_unreadable_cursor_is_no_cursor(server: Server, provider: IcsProvider) -> None:
    for cursor in ("not json", "[]", '{"window": 3}', '{"etag": "\\"v1\\""}'):
        read = await provider.busy(conn(server.url("/cal.ics")), WINDOW, cursor)
        assert not read.unchanged
        assert starts(read.busy) == SPRING_MONDAYS


async def test_a_redirect_is_followed_when_its_target_is_allowed(
    server: Server, provider: IcsProvider
) -> None:
    read = await provider.busy(conn(server.url("/x/redirect")), WINDOW, None)
    assert starts(read.busy) == SPRING_MONDAYS
    assert [path for path, _ in server.hits] == ["/x/redirect", "/cal.ics"]


async def test_a_redirect_to_a_refused_address_is_not_followed(
    server: Server, provider: IcsProvider
) -> None:
    with pytest.raises(ProviderUnreachable, match=r"169\.254\.169\.254.*link-local"):
        await provider.busy(conn(server.url("/x/redirect-metadata")), WINDOW, None)


async def test_a_redirect_to_a_file_is_not_followed(server: Server, provider: IcsProvider) -> None:
    with pytest.raises(ProviderUnreachable, match="invalid_url"):
        await provider.busy(conn(server.url("/x/redirect-file")), WINDOW, None)


async def test_redirects_are_followed_a_few_times_only(
    server: Server, provider: IcsProvider
) -> None:
    with pytest.raises(ProviderUnreachable, match="redirects"):
        await provider.busy(conn(server.url("/x/redirect-loop")), WINDOW, None)
    assert len(server.hits) == 6


# -- refusals and failures ---------------------------------------------------------------


async def test_a_private_address_is_refused_unless_allowed(server: Server) -> None:
    guarded = IcsProvider(ProviderSettings(allow_private_urls=False))
    try:
        for url in (server.url("/cal.ics"), f"http://localhost:{server.port}/cal.ics"):
            with pytest.raises(ProviderUnreachable, match="SLOTWARD_ALLOW_PRIVATE_URLS") as caught:
                await guarded.busy(conn(url), WINDOW, None)
            assert "url_not_allowed" in str(caught.value)
            assert "loopback" in str(caught.value)
    finally:
        await guarded.close()
    assert server.hits == []


@pytest.mark.parametrize(
    ("path", "reason"),
    [("/x/fail", "HTTP 500"), ("/x/missing", "HTTP 404"), ("/x/slow", "timed out after 1 s")],
)
async def test_a_failing_server_is_unreachable(
    server: Server, provider: IcsProvider, path: str, reason: str
) -> None:
    with pytest.raises(ProviderUnreachable, match=reason):
        await provider.busy(conn(server.url(path)), WINDOW, None)


async def test_a_503_says_when_to_come_back(server: Server, provider: IcsProvider) -> None:
    with pytest.raises(ProviderUnreachable, match="HTTP 503") as caught:
        await provider.busy(conn(server.url("/x/busy")), WINDOW, None)
    assert caught.value.retry_after == 120.0


async def test_a_refused_connection_is_unreachable(provider: IcsProvider) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with pytest.raises(ProviderUnreachable, match="connection failed"):
        await provider.busy(conn(f"http://127.0.0.1:{port}/cal.ics"), WINDOW, None)


async def test_no_secret_of_the_url_is_in_a_message(server: Server, provider: IcsProvider) -> None:
    url = f"http://127.0.0.1:{server.port}/private-token123/x/fail?key=sekrit"
    with pytest.raises(ProviderUnreachable) as caught:
        await provider.busy(conn(url), WINDOW, None)
    message = str(caught.value)
    assert f"http://127.0.0.1:{server.port}" in message
    assert "token123" not in message
    assert "sekrit" not in message


async def test_a_url_with_credentials_is_refused_without_showing_them(
    provider: IcsProvider,
) -> None:
    with pytest.raises(ProviderUnreachable) as caught:
        await provider.busy(conn("https://ann:hunter2@calendar.example/cal.ics"), WINDOW, None)
    assert "hunter2" not in str(caught.value)


async def test_a_declared_oversized_body_is_refused_unread(
    server: Server, provider: IcsProvider
) -> None:
    with pytest.raises(CalendarInvalid, match="larger than"):
        await provider.busy(conn(server.url("/x/declared-big")), WINDOW, None)


async def test_an_endless_body_is_refused_without_reading_it_all(
    server: Server, provider: IcsProvider
) -> None:
    with pytest.raises(CalendarInvalid, match="larger than"):
        await provider.busy(conn(server.url("/x/endless")), WINDOW, None)
    await asyncio.sleep(0.2)  # real network timing: the server notices the closed connection
    assert server.sent < 3 * MAX_BYTES


async def test_a_huge_etag_is_not_kept(server: Server, provider: IcsProvider) -> None:
    read = await provider.busy(conn(server.url("/x/huge-etag")), WINDOW, None)
    assert starts(read.busy) == SPRING_MONDAYS
    assert read.cursor is not None
    assert len(read.cursor) < 200


async def test_a_body_that_is_no_calendar_is_invalid(server: Server, provider: IcsProvider) -> None:
    with pytest.raises(CalendarInvalid):
        await provider.busy(conn(server.url("/x/garbage")), WINDOW, None)


# -- files -----------------------------------------------------------------------------------


async def test_a_file_is_read_and_then_unchanged_until_it_changes(
    tmp_path: Path, provider: IcsProvider
) -> None:
    path = tmp_path / "cal.ics"
    path.write_bytes(WEEKLY)
    url = path.as_uri()
    first = await provider.busy(conn(url), WINDOW, None)
    assert starts(first.busy) == SPRING_MONDAYS
    second = await provider.busy(conn(url), WINDOW, first.cursor)
    assert second.unchanged
    assert second.cursor == first.cursor
    assert not (await provider.busy(conn(url), LATER, first.cursor)).unchanged
    path.write_bytes(ics(("new", "20300320T100000Z", "20300320T110000Z")))
    os.utime(path, ns=(0, 10**18))  # a new mtime even on a coarse file system clock
    third = await provider.busy(conn(url), WINDOW, first.cursor)
    assert [b.uid for b in third.busy] == ["new"]


async def test_a_missing_file_is_unreachable(tmp_path: Path, provider: IcsProvider) -> None:
    with pytest.raises(ProviderUnreachable, match="No such file"):
        await provider.busy(conn((tmp_path / "absent.ics").as_uri()), WINDOW, None)


async def test_an_oversized_file_is_invalid(tmp_path: Path, provider: IcsProvider) -> None:
    path = tmp_path / "big.ics"
    path.write_bytes(b"X" * (MAX_BYTES + 1))
    with pytest.raises(CalendarInvalid, match="larger than"):
        await provider.busy(conn(path.as_uri()), WINDOW, None)


async def test_a_file_url_is_refused_unless_private_urls_are_allowed(tmp_path: Path) -> None:
    path = tmp_path / "cal.ics"
    path.write_bytes(WEEKLY)
    guarded = ics_provider(ProviderSettings(allow_private_urls=False))
    with pytest.raises(ProviderUnreachable, match="SLOTWARD_ALLOW_PRIVATE_URLS"):
        await guarded.busy(conn(path.as_uri()), WINDOW, None)


# -- what it is --------------------------------------------------------------------------------


async def test_it_cannot_write(provider: IcsProvider) -> None:
    event = CalendarEvent(
        uid="hold_1@slotward",
        start=WINDOW.start,
        end=WINDOW.start + timedelta(hours=1),
        summary="s",
        description="d",
        status="TENTATIVE",
        sequence=1,
    )
    put = await provider.put_event(conn("https://calendar.example/cal.ics"), event)
    deleted = await provider.delete_event(conn("https://calendar.example/cal.ics"), event.uid)
    for outcome in (put, deleted):
        assert not outcome.ok
        assert outcome.error == "the ics provider is read-only"
    assert provider.name == "ics"
    assert not provider.capabilities.writes
    assert not provider.capabilities.credentials
    assert not provider.capabilities.incremental
    assert provider.capabilities.schemes == ("https", "http", "file")
