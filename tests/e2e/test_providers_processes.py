"""Calendar providers in `slotward serve` processes: killed mid-write, credentials, a plugin.

Each server is a real subprocess on a real SQLite file or PostgreSQL database
(both, every scenario), its relay, writer and sync worker on the real clock
with a two-second provider timeout where a server is killed, so a write it
claimed is taken up by the next one once its sixteen-second lease has run out. The
calendars are a real Radicale (behind a proxy that holds answers back, where
writes must be in flight) and a directory of the memcal plugin, installed
with pip into a folder on the server's PYTHONPATH.
"""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import aiohttp
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from slotward.engine.model import Principal
from tests.conftest import TEMPLATE
from tests.e2e.calendars import (
    DAV_USERS,
    WITHIN,
    GatedProxy,
    by_uid,
    calendar_when,
    dav_calendar_fixture,  # noqa: F401  (a fixture: found by name)
    dav_fixture,  # noqa: F401  (a fixture: found by name)
    dav_htpasswd_fixture,  # noqa: F401  (a fixture: found by name)
    eventually,
    folder_when,
    make_keys,
    over_http,
    radicale_events,
    serve_process,
    uid,
)
from tests.e2e.receiver import wait_until
from tests.pgserver import PgServer
from tests.plugins import install_fixture_package
from tests.radicale import RadicaleServer, vevent

ALEX = "alex@example.com"
BLAIR = "blair@example.com"
KEYS = (Principal("acme", "admin-1", "admin", 50), Principal("acme", "agent-1", "agent", 50))
LEASE = 16.0  # a claimed write's lease: 3 x SLOTWARD_PROVIDER_TIMEOUT (2 s) + 10 s
# The servers killed mid-write: a short lease, and claims that decide on the mirror
# (one claim reads it first), so two dozen at once read no calendar.
KILLED = {"SLOTWARD_PROVIDER_TIMEOUT": "2", "SLOTWARD_PROVIDER_MAX_STALENESS": "3600"}
_DATABASES = itertools.count()


@dataclass(frozen=True)
class Database:
    """A fresh, migrated database, and where its bytes are on disk."""

    url: str
    sqlite: Path | None = None
    pg: PgServer | None = None

    def stored_bytes(self) -> bytes:
        """What the database holds as bytes: the SQLite file and its journals, or the
        rows of calendar_bindings and the table's own file after a checkpoint."""
        if self.sqlite is not None:
            files = sorted(self.sqlite.parent.glob(self.sqlite.name + "*"))
            return b"".join(f.read_bytes() for f in files)
        assert self.pg is not None
        engine = create_engine(self.url.replace("+asyncpg", "+psycopg"), poolclass=NullPool)
        try:
            with engine.begin() as conn:
                rows = conn.execute(text("SELECT convert_to(t::text, 'UTF8') FROM "
                                         "calendar_bindings t")).scalars().all()  # fmt: skip
                conn.execute(text("CHECKPOINT"))  # the heap's pages are on disk
                path = conn.execute(text("SELECT pg_relation_filepath('calendar_bindings')"))
                relation = self.pg.data / str(path.scalar_one())
        finally:
            engine.dispose()
        assert rows, "no binding stored"
        return b"\n".join(bytes(r) for r in rows) + relation.read_bytes()


@pytest.fixture(params=["sqlite", "postgres"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Database:
    if request.param == "sqlite":
        path = tmp_path / "slotward.db"
        shutil.copyfile(request.getfixturevalue("sqlite_template"), path)
        return Database(f"sqlite+aiosqlite:///{path}", sqlite=path)
    pg: PgServer = request.getfixturevalue("postgres")
    url = pg.create_database(f"providers_processes_{next(_DATABASES)}", template=TEMPLATE)
    return Database(url, pg=pg)


@pytest.fixture(scope="module")
def memcal_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The memcal plugin, pip-installed into a folder of its own."""
    return install_fixture_package("slotward-memcal", tmp_path_factory.mktemp("site"))


def _at(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


def _slot(i: int) -> str:
    """The i-th quarter hour from 08:00 on 14 October 2030."""
    minutes = 8 * 60 + 15 * i
    return f"2030-10-14T{minutes // 60:02d}:{minutes % 60:02d}:00Z"


async def test_a_server_killed_mid_write_leaves_one_event_per_live_hold(
    database: Database, tmp_path: Path, dav: RadicaleServer, dav_calendar: str
) -> None:
    admin, agent = await make_keys(database.url, *KEYS)
    upstream = dav.url.rstrip("/")
    async with GatedProxy(upstream).running() as proxy, aiohttp.ClientSession() as session:
        async with serve_process(database.url, tmp_path / "first.log", KILLED) as first:
            s = over_http(first.base, session, admin, agent)
            await s.bind(ALEX, {"provider": "caldav", "url": proxy.url(dav_calendar)})
            last = await s.hold(ALEX, _slot(23), minutes=15)  # the mirror now reaches them all
            holds = [
                *await asyncio.gather(*(s.hold(ALEX, _slot(i), minutes=15) for i in range(23))),
                last,
            ]
            released = holds[::3]
            for hold in released:
                assert (await s.agent.release(hold["id"])).status == 200
            # Radicale has carried the PUTs out; the writer has heard nothing.
            await wait_until(lambda: proxy.held >= 8, WITHIN, lambda: f"{proxy.held} held")
            in_flight = proxy.held
            first.kill()
        proxy.gate.set()
        async with serve_process(database.url, tmp_path / "second.log", KILLED) as second:
            s = over_http(second.base, session, admin, agent)
            await eventually(lambda: s.settled(ALEX), LEASE + WITHIN, lambda: "writes pending")
        events = by_uid(await radicale_events(dav, dav_calendar))
    live = [h for h in holds if h not in released]
    assert set(events) == {uid(h) for h in live}  # none for a released hold, one per live one
    assert {e.status for e in events.values()} == {"TENTATIVE"}
    # What was in flight at the kill was written again (the same UID, the same resource).
    again = [path for path, n in proxy.writes.items() if n >= 2]
    assert len(again) >= 1, (in_flight, proxy.writes)


def _secrets(user: str, *passwords: str) -> list[bytes]:
    """The passwords, and the Basic credentials that would carry them."""
    basic = [base64.b64encode(f"{user}:{p}".encode()) for p in passwords]
    return [p.encode() for p in passwords] + basic


async def test_a_password_opens_the_calendar_and_is_never_shown_or_stored_in_clear(
    database: Database, tmp_path: Path, dav_htpasswd: RadicaleServer
) -> None:
    dav = dav_htpasswd
    right, wrong = DAV_USERS["alice"], "Wrong-Pass-For-Alice-0451"
    cal = await asyncio.to_thread(dav.calendar, None, "alice")
    admin, agent = await make_keys(database.url, *KEYS)
    log = tmp_path / "serve.log"
    env = {"SLOTWARD_LOG_LEVEL": "DEBUG"}  # everything the server would ever say
    async with aiohttp.ClientSession() as session, serve_process(database.url, log, env) as p:
        s = over_http(p.base, session, admin, agent)
        alex = await s.bind(ALEX, {"provider": "caldav", "url": cal, "username": "alice",
                                   "password": right})  # fmt: skip
        assert alex["sync"]["status"] == "ok", alex
        assert alex["has_password"] is True
        assert "password" not in alex
        blair = await s.bind(BLAIR, {"provider": "caldav", "url": cal, "username": "alice",
                                     "password": wrong})  # fmt: skip
        assert blair["sync"]["status"] == "error", blair
        error = blair["sync"]["error"].lower()
        assert any(w in error for w in ("401", "unauthori", "authenticat", "credential")), error

        held = await s.hold(ALEX, "2030-10-14T14:00:00Z")
        events = await calendar_when(dav, cal, lambda e: uid(held) in e, user="alice")
        assert events[uid(held)].status == "TENTATIVE"
        refused = await s.claim(BLAIR, "2030-10-14T16:00:00Z")
        assert refused.status == 503, refused.json
        assert refused.json["code"] == "provider_unavailable"
        assert (await s.binding(BLAIR))["sync"]["status"] == "error"
        await eventually(lambda: s.settled(ALEX), WITHIN)
    secrets = _secrets("alice", right, wrong)
    assert s.seen
    for answer in s.seen:
        assert not [x for x in secrets if x in answer], answer
    said = log.read_bytes()
    assert b"calendar" in said  # the log has lines of the providers' work (DEBUG)
    assert not [x for x in secrets if x in said]
    stored = database.stored_bytes()
    assert not [x for x in secrets if x in stored]


def _providers_list(site: Path) -> dict[str, dict[str, object]]:
    env = {**os.environ, "PYTHONPATH": str(site)}
    run = subprocess.run(
        [sys.executable, "-m", "slotward.api.cli.main", "providers", "list", "--json"],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    return {row["name"]: row for row in json.loads(run.stdout)}


async def test_a_plugin_calendar_gets_the_holds_and_blocks_claims(
    database: Database, tmp_path: Path, memcal_site: Path
) -> None:
    listed = await asyncio.to_thread(_providers_list, memcal_site)
    assert listed["memcal"]["source"] == "slotward-memcal 0.1.0"
    assert listed["memcal"]["writes"] is True
    folder = tmp_path / "alex-calendar"
    folder.mkdir()
    admin, agent = await make_keys(database.url, *KEYS)
    env = {"PYTHONPATH": str(memcal_site)}
    async with (
        aiohttp.ClientSession() as session,
        serve_process(database.url, tmp_path / "serve.log", env) as p,
    ):
        s = over_http(p.base, session, admin, agent)
        alex = await s.bind(ALEX, {"provider": "memcal", "url": folder.as_uri()})
        assert alex["sync"]["status"] == "ok", alex
        held = await s.hold(ALEX, "2030-10-14T14:00:00Z")
        events = await folder_when(folder, lambda e: uid(held) in e)
        assert events[uid(held)].status == "TENTATIVE"
        assert events[uid(held)].summary == "Strategy Sync with Alex"
        done = await s.agent.commit(held["id"], held["token"])
        assert done.status == 200, done.json
        await folder_when(folder, lambda e: e[uid(held)].status == "CONFIRMED")

        (folder / "dentist.ics").write_bytes(vevent(
            "dentist-4@example.com", datetime.fromisoformat("2030-10-14T16:00:00+00:00"),
            datetime.fromisoformat("2030-10-14T17:00:00+00:00"),
        ))  # fmt: skip
        written = datetime.now(UTC)

        async def read_since() -> bool:  # whichever reads first, the worker or a claim
            sync = (await s.binding(ALEX))["sync"]
            return sync["status"] == "ok" and _at(sync["external_as_of"]) > written

        await eventually(read_since, WITHIN, lambda: "the directory was never read again")
        refused = await s.claim(ALEX, "2030-10-14T16:30:00Z")
        assert refused.status == 409, refused.json
        assert refused.json["conflicts"] == [
            {"attendee": alex["attendee"], "start": "2030-10-14T16:00:00Z",
             "end": "2030-10-14T17:00:00Z", "kind": "external"},
        ]  # fmt: skip

        assert (await s.agent.release(held["id"])).status == 200
        events = await folder_when(folder, lambda e: uid(held) not in e)
        assert set(events) == {"dentist-4@example.com"}


async def test_serve_takes_a_staleness_bound_of_zero_from_the_environment(
    tmp_path: Path, sqlite_template: Path
) -> None:
    path = tmp_path / "slotward.db"
    shutil.copyfile(sqlite_template, path)
    env = {"SLOTWARD_PROVIDER_MAX_STALENESS": "0"}  # every decision reads the calendars
    async with serve_process(f"sqlite+aiosqlite:///{path}", tmp_path / "serve.log", env) as p:
        assert p.proc.poll() is None
