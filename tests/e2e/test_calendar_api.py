"""The calendar binding API over real HTTP, on both stores.

An admin binds an attendee to a calendar (PUT), reads the binding with its sync
state (GET) and unbinds it (DELETE). The PUT reads the calendar once, through
the real adapters: an ICS file on disk, an ICS calendar and a CalDAV server on
loopback (real aiohttp servers, which also record what the adapter sent them).
A password is answered by no call, written to no log line and stored only
sealed; after a key rotation (the old key in SLOTWARD_SECRET_KEY_OLD) it still
opens. Every refusal is a 422 with its code and field that stores nothing.
"""

from __future__ import annotations

import base64
import io
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from sqlalchemy import Engine

from slotward.api.bootstrap import bootstrap
from slotward.api.config import Config
from slotward.engine.calendars import CalendarBinding
from slotward.engine.codes import CODES
from slotward.engine.model import Role
from tests.e2e.conftest import Answer, Client, Server, serving
from tests.e2e.test_openapi import conform

KEY = "calendar-secret-key-0123456789"
NEW_KEY = "calendar-secret-key-rotated-9876543210"
PASSWORD = "hunter2-Very-Secret-Calendar-Password"
OPEN = {"secret_key": KEY, "allow_private_urls": True}
PATH = "/v1/attendees/{attendee}/calendar"
ALEX = "alex@example.com"
ICS = """BEGIN:VCALENDAR\r
VERSION:2.0\r
PRODID:-//slotward tests//EN\r
BEGIN:VEVENT\r
UID:dentist-1@example.com\r
DTSTAMP:20300901T000000Z\r
DTSTART:20301002T100000Z\r
DTEND:20301002T110000Z\r
SUMMARY:Dentist\r
END:VEVENT\r
END:VCALENDAR\r
"""
BINDING_TABLES = ("calendar_bindings", "calendar_busy", "calendar_writes", "audit_log")


@pytest.fixture
async def spec(server: Server) -> dict[str, Any]:
    answer = await server.anonymous().get("/openapi.json")
    doc: dict[str, Any] = answer.json
    return doc


@dataclass
class Calendar:
    """A calendar on loopback: ICS at /cal.ics, anything else a refused CalDAV call.

    It records the Authorization header of every request, so a test sees the
    password the adapter opened and sent."""

    base: str = ""
    auths: list[str | None] = field(default_factory=list)

    async def handle(self, request: web.Request) -> web.Response:
        self.auths.append(request.headers.get("Authorization"))
        if request.path == "/cal.ics" and request.method == "GET":
            return web.Response(text=ICS, content_type="text/calendar")
        return web.Response(status=401, headers={"WWW-Authenticate": 'Basic realm="dav"'})


@pytest.fixture
async def calendar() -> AsyncIterator[Calendar]:
    cal = Calendar()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", cal.handle)
    async with serving(app) as base:
        cal.base = base
        yield cal


@pytest.fixture
def ics_file(tmp_path: Path) -> Path:
    path = tmp_path / "alex.ics"
    path.write_text(ICS)
    return path


async def _admin(server: Server, tenant: str = "acme") -> Client:
    return await server.key(tenant=tenant, agent="ops", role="admin")


def _path(attendee: str = ALEX) -> str:
    return PATH.format(attendee=attendee)


async def _put(client: Client, body: dict[str, Any], attendee: str = ALEX) -> Answer:
    return await client.request("PUT", _path(attendee), body)


def _stored(server: Server) -> dict[str, int]:
    counts = server.table_counts()
    return {t: counts[t] for t in BINDING_TABLES}


def _binding(server: Server, tenant: str = "acme") -> tuple[Any, ...]:
    [row] = server.sql(
        "SELECT attendee, provider, url, username, password FROM calendar_bindings "
        "WHERE tenant = ?",
        tenant,
    )
    return row


# -- round trips ---------------------------------------------------------------------


@pytest.mark.parametrize("config_overrides", [OPEN])
async def test_an_ics_file_binds_reads_and_unbinds(
    server: Server, spec: dict[str, Any], ics_file: Path
) -> None:
    admin = await _admin(server)
    url = ics_file.as_uri()
    put = await _put(admin, {"provider": "ics", "url": url, "timezone": "Europe/Berlin"})
    assert put.status == 200, put.json
    doc = conform(spec, "PUT", PATH, put)
    assert doc["attendee"].startswith("att_")
    assert (doc["provider"], doc["url"], doc["username"], doc["has_password"]) == (
        "ics", url, None, False,
    )  # fmt: skip
    assert (doc["timezone"], doc["on_unavailable"]) == ("Europe/Berlin", "fail_closed")
    sync = doc["sync"]
    assert (sync["status"], sync["error"], sync["failures"]) == ("ok", None, 0), sync
    assert sync["external_as_of"] == "2030-10-01T09:00:00Z"  # the server's clock
    assert sync["covers"] is not None
    assert sync["writes"] == {"pending": 0, "delivered": 0, "dead": 0}  # ics writes nothing
    busy = server.sql("SELECT start_us, end_us FROM calendar_busy")
    assert len(busy) == 1  # the dentist

    read = await admin.get(_path())
    assert conform(spec, "GET", PATH, read) == doc
    assert (await admin.get(_path(doc["attendee"]))).json == doc  # by id as by email

    gone = await admin.request("DELETE", _path())
    assert (gone.status, gone.body) == (204, b"")
    assert server.sql("SELECT count(*) FROM calendar_bindings") == [(0,)]
    assert server.sql("SELECT count(*) FROM calendar_busy") == [(0,)]
    for method in ("GET", "DELETE"):
        again = await admin.request(method, _path())
        assert (again.status, again.json["code"]) == (404, "calendar_not_found")
    actions = [e["action"] for e in (await admin.get("/v1/audit")).json["items"]]
    assert actions == ["calendar.bind", "calendar.unbind"]


@pytest.mark.parametrize("config_overrides", [OPEN])
async def test_an_ics_url_on_loopback_binds_and_a_second_put_replaces_it(
    server: Server, calendar: Calendar, ics_file: Path
) -> None:
    admin = await _admin(server)
    first = await _put(admin, {"provider": "ics", "url": ics_file.as_uri()})
    assert first.status == 200
    url = f"{calendar.base}/cal.ics"
    server.clock.advance(60)
    second = await _put(admin, {"provider": "ics", "url": url, "on_unavailable": "last_known"})
    assert second.status == 200, second.json
    doc = second.json
    assert (doc["url"], doc["on_unavailable"], doc["sync"]["status"]) == (url, "last_known", "ok")
    assert (doc["created_at"], doc["updated_at"]) == (first.json["created_at"],
                                                      "2030-10-01T09:01:00Z")  # fmt: skip
    assert calendar.auths == [None]  # read once, with no credentials
    assert server.sql("SELECT count(*) FROM calendar_bindings") == [(1,)]


@pytest.mark.parametrize("config_overrides", [OPEN])
async def test_an_unreadable_calendar_still_binds_and_says_why(server: Server) -> None:
    admin = await _admin(server)
    put = await _put(admin, {"provider": "ics", "url": "file:///nonexistent/slotward/x.ics"})
    assert put.status == 200, put.json
    sync = put.json["sync"]
    assert (sync["status"], sync["failures"], sync["external_as_of"]) == ("error", 1, None)
    assert sync["error"]
    assert sync["error_at"] == "2030-10-01T09:00:00Z"


MARS = (
    "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//test//EN\r\nBEGIN:VEVENT\r\n"
    "UID:mars-1\r\nDTSTAMP:20300101T000000Z\r\nDTSTART;TZID=Mars/Olympus:20301002T100000\r\n"
    "DTEND;TZID=Mars/Olympus:20301002T110000\r\nEND:VEVENT\r\nEND:VCALENDAR\r\n"
)


@pytest.mark.parametrize("config_overrides", [OPEN])
@pytest.mark.parametrize("policy", ["fail_closed", "last_known"])
async def test_an_unknown_tzid_puts_the_binding_in_error_never_in_floating_time(
    server: Server, tmp_path: Path, policy: str
) -> None:
    path = tmp_path / "mars.ics"
    path.write_text(MARS)
    admin = await _admin(server)
    body = {"provider": "ics", "url": path.as_uri(), "on_unavailable": policy}
    put = await _put(admin, body)
    assert put.status == 200, put.json
    got = await admin.request("GET", _path())
    for sync in (put.json["sync"], got.json["sync"]):
        assert sync["status"] == "error"
        assert "Mars/Olympus" in sync["error"]
    agent = await server.key(tenant="acme", agent="bot", role="agent")
    claim = {"workflow_id": "wf-mars", "attendees": [ALEX], "start": "2030-10-02T10:00:00Z",
             "duration_minutes": 30, "title": "Sync"}  # fmt: skip
    answer = await agent.request("POST", "/v1/holds", claim)
    if policy == "fail_closed":
        assert (answer.status, answer.json["code"]) == (503, "provider_unavailable")
        assert "Mars/Olympus" in answer.json["detail"]
        assert answer.headers["Retry-After"]
    else:  # decided on the mirror, which holds nothing: and the answer says so
        assert answer.status == 201, answer.json
        assert answer.json["external_stale"] is True


@pytest.mark.parametrize("config_overrides", [OPEN])
async def test_binding_queues_the_attendees_live_holds_for_a_calendar_that_writes(
    server: Server, calendar: Calendar, hold_body: dict[str, Any]
) -> None:
    agent = await server.key()
    hold = await agent.create(hold_body)
    assert hold.status == 201
    admin = await _admin(server)
    put = await _put(admin, {"provider": "caldav", "url": f"{calendar.base}/dav/alex/"})
    assert put.status == 200, put.json
    assert put.json["sync"]["writes"] == {"pending": 1, "delivered": 0, "dead": 0}
    rows = server.sql("SELECT hold_id, action, status FROM calendar_writes")
    assert rows == [(hold.json["id"], "put", "TENTATIVE")]


# -- the password -----------------------------------------------------------------------


def _basic(username: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{username}:{password}".encode()).decode()


def _database_bytes(server: Server, database: tuple[str, Engine]) -> bytes:
    url, _ = database
    if url.startswith("sqlite"):
        path = Path(url.split("///", 1)[1])
        wal = path.with_name(path.name + "-wal")
        return path.read_bytes() + (wal.read_bytes() if wal.exists() else b"")
    rows = server.sql("SELECT * FROM calendar_bindings")
    return repr(rows).encode()


@pytest.mark.parametrize("config_overrides", [OPEN])
async def test_the_password_is_sealed_never_answered_never_logged_and_survives_a_key_rotation(
    server: Server,
    calendar: Calendar,
    log_stream: io.StringIO,
    database: tuple[str, Engine],
) -> None:
    admin = await _admin(server)
    url = f"{calendar.base}/dav/alex/"
    body = {"provider": "caldav", "url": url, "username": "alex", "password": PASSWORD}
    put = await _put(admin, body)
    assert put.status == 200, put.json
    assert (put.json["username"], put.json["has_password"]) == ("alex", True)
    assert _basic("alex", PASSWORD) in calendar.auths  # opened for the adapter, and sent
    answers = [put, await admin.get(_path()), await admin.get("/v1/audit")]
    for answer in answers:
        assert PASSWORD.encode() not in answer.body
    refused = await _put(admin, {**body, "timezone": "Mars/Olympus"})
    assert refused.status == 422
    assert PASSWORD.encode() not in refused.body
    assert PASSWORD not in log_stream.getvalue()
    assert log_stream.getvalue()  # the capture did see the server's lines
    attendee, _, _, username, sealed = _binding(server)
    assert username == "alex"
    assert sealed.startswith("v1.")
    assert PASSWORD not in sealed
    assert PASSWORD.encode() not in _database_bytes(server, database)

    # A restart with a new key, the old one kept to open what it sealed.
    db_url, _ = database
    rotated = Config(db_url=db_url, secret_key=NEW_KEY, secret_key_old=KEY,
                     allow_private_urls=True)  # fmt: skip
    again = await bootstrap(rotated, clock=server.clock)
    try:
        stored = await again.store.read(lambda uow: _get(uow, "acme", attendee))
        assert again.providers.connection(stored).password == PASSWORD
        calendar.auths.clear()
        await again.providers.read_now(again, stored)
        assert calendar.auths
        assert set(calendar.auths) == {_basic("alex", PASSWORD)}
        without_old = await bootstrap(Config(db_url=db_url, secret_key=NEW_KEY), clock=server.clock)
        try:
            with pytest.raises(ValueError, match="sealed under key") as caught:
                without_old.providers.connection(stored)
            assert PASSWORD not in str(caught.value)
            # A read of that binding fails as the binding's, with an error saying why.
            current = await without_old.store.read(lambda uow: _get(uow, "acme", attendee))
            failed = await without_old.providers.read_now(without_old, current)
            assert failed.status == "error"
            assert "SLOTWARD_SECRET_KEY" in (failed.error or "")
        finally:
            await without_old.providers.close()
            await without_old.store.close()
    finally:
        await again.providers.close()  # its adapters' connections, then the store
        await again.store.close()


def _get(uow: Any, tenant: str, attendee: str) -> CalendarBinding:
    with uow:
        found: CalendarBinding | None = uow.calendars.get(tenant, attendee)
    assert found is not None
    return found


async def test_a_password_needs_the_servers_secret_key(server: Server) -> None:
    admin = await _admin(server)
    before = _stored(server)
    body = {"provider": "caldav", "url": "https://dav.example.com/alex/", "username": "alex",
            "password": PASSWORD}  # fmt: skip
    answer = await _put(admin, body)
    assert (answer.status, answer.json["code"]) == (422, "secret_key_required")
    assert answer.json["field"] == "password"
    assert PASSWORD.encode() not in answer.body
    assert _stored(server) == before


# -- refusals ---------------------------------------------------------------------------

CALDAV = {"provider": "caldav", "url": "https://dav.example.com/alex/"}
ICS_URL = {"provider": "ics", "url": "https://cal.example.com/alex.ics"}
REFUSED: list[tuple[str, dict[str, Any], str, str]] = [
    ("unknown field", {**ICS_URL, "color": "red"}, "unknown_field", "color"),
    ("no provider", {"url": "https://cal.example.com/a.ics"}, "missing_field", "provider"),
    ("unknown provider", {**ICS_URL, "provider": "exchange"}, "unknown_provider", "provider"),
    ("no url", {"provider": "ics"}, "missing_field", "url"),
    ("relative url", {**ICS_URL, "url": "/alex.ics"}, "invalid_url", "url"),
    ("ftp", {**ICS_URL, "url": "ftp://cal.example.com/a.ics"}, "unsupported_scheme", "url"),
    ("caldav file", {**CALDAV, "url": "file:///tmp/a.ics"}, "unsupported_scheme", "url"),
    ("credentials in url", {**CALDAV, "url": "https://alex:pw@dav.example.com/"},
     "invalid_url", "url"),
    ("fragment", {**ICS_URL, "url": "https://cal.example.com/a.ics#x"}, "invalid_url", "url"),
    ("numeric host", {**ICS_URL, "url": "http://2130706433/a.ics"}, "invalid_url", "url"),
    ("loopback", {**ICS_URL, "url": "http://127.0.0.1:9/a.ics"}, "url_not_allowed", "url"),
    ("metadata", {**ICS_URL, "url": "http://169.254.169.254/a.ics"}, "url_not_allowed", "url"),
    ("a file, private urls off", {**ICS_URL, "url": "file:///tmp/a.ics"},
     "url_not_allowed", "url"),
    ("ics username", {**ICS_URL, "username": "alex"}, "credentials_not_supported", "username"),
    ("password alone", {**CALDAV, "password": "pw"}, "missing_field", "username"),
    ("timezone", {**ICS_URL, "timezone": "Mars/Olympus"}, "unknown_timezone", "timezone"),
    ("host timezone", {**ICS_URL, "timezone": "localtime"}, "unknown_timezone", "timezone"),
    ("policy", {**ICS_URL, "on_unavailable": "maybe"}, "invalid_field", "on_unavailable"),
    ("username type", {**CALDAV, "username": 7}, "invalid_field", "username"),
]  # fmt: skip


@pytest.mark.parametrize(("body", "code", "field"), [r[1:] for r in REFUSED],
                         ids=[r[0].replace(" ", "-") for r in REFUSED])  # fmt: skip
async def test_every_refusal_is_a_422_with_its_field_that_stores_nothing(
    server: Server, body: dict[str, Any], code: str, field: str
) -> None:
    admin = await _admin(server)
    before = _stored(server)
    answer = await _put(admin, body)
    assert (answer.status, answer.json["code"], answer.json.get("field")) == (422, code, field), (
        answer.json
    )
    assert code in CODES
    assert _stored(server) == before


async def test_an_unknown_provider_is_told_which_there_are(server: Server) -> None:
    answer = await _put(await _admin(server), {**ICS_URL, "provider": "exchange"})
    assert "caldav" in answer.json["detail"]
    assert "ics" in answer.json["detail"]


async def test_a_file_is_refused_as_the_most_private_address(server: Server) -> None:
    answer = await _put(await _admin(server), {**ICS_URL, "url": "file:///etc/passwd"})
    assert "SLOTWARD_ALLOW_PRIVATE_URLS" in answer.json["detail"]
    assert "private" in answer.json["detail"]


@pytest.mark.parametrize("config_overrides", [OPEN])
async def test_link_local_stays_refused_with_private_urls_allowed(server: Server) -> None:
    answer = await _put(await _admin(server), {**ICS_URL, "url": "http://169.254.169.254/x"})
    assert (answer.status, answer.json["code"]) == (422, "url_not_allowed")


async def test_a_path_that_names_no_attendee_is_refused(server: Server) -> None:
    admin = await _admin(server)
    for method in ("PUT", "GET", "DELETE"):
        answer = await admin.request(method, _path("not%20an%20attendee!"), ICS_URL)
        assert (answer.status, answer.json["code"]) == (422, "invalid_attendee"), method
        assert answer.json["field"] == "attendee"


@pytest.mark.parametrize("config_overrides", [{**OPEN, "allow_unknown_attendees": False}])
async def test_a_closed_directory_refuses_an_unknown_attendee(
    server: Server, ics_file: Path
) -> None:
    admin = await _admin(server)
    before = _stored(server)
    answer = await _put(admin, {"provider": "ics", "url": ics_file.as_uri()})
    assert (answer.status, answer.json["code"]) == (422, "unknown_attendee")
    assert _stored(server) == before
    known = await admin.post("/v1/attendees", {"id": "alex", "emails": [ALEX]})
    assert known.status == 200
    bound = await _put(admin, {"provider": "ics", "url": ics_file.as_uri()})
    assert (bound.status, bound.json["attendee"]) == (200, "alex")


# -- who may ----------------------------------------------------------------------------


@pytest.mark.parametrize("config_overrides", [OPEN])
@pytest.mark.parametrize("role", ["agent", "reviewer"])
async def test_only_admins_may_bind_read_or_unbind(
    server: Server, role: Role, ics_file: Path
) -> None:
    admin = await _admin(server)
    assert (await _put(admin, {"provider": "ics", "url": ics_file.as_uri()})).status == 200
    other = await server.key(agent=f"a-{role}", role=role)
    for method in ("PUT", "GET", "DELETE"):
        body = {"provider": "ics", "url": ics_file.as_uri()} if method == "PUT" else None
        answer = await other.request(method, _path(), body)
        assert (answer.status, answer.json["code"]) == (403, "role_forbidden"), method
    assert server.sql("SELECT count(*) FROM calendar_bindings") == [(1,)]


@pytest.mark.parametrize("config_overrides", [OPEN])
async def test_another_tenants_binding_is_not_found(server: Server, ics_file: Path) -> None:
    admin = await _admin(server)
    put = await _put(admin, {"provider": "ics", "url": ics_file.as_uri()})
    stranger = await _admin(server, "globex")
    for attendee in (ALEX, put.json["attendee"]):
        for method in ("GET", "DELETE"):
            answer = await stranger.request(method, _path(attendee))
            assert (answer.status, answer.json["code"]) == (404, "calendar_not_found")
            assert ics_file.as_uri().encode() not in answer.body
    assert (await admin.get(_path())).status == 200
    assert _binding(server)[2] == ics_file.as_uri()
