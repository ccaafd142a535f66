"""A real slotward HTTP server on a real SQLite file, with a clock tests move.

The app is the production one (``bootstrap`` + ``build_app``); only the clock
is replaced, so expiry is tested by advancing time, never by sleeping. The
sweeper is off so tests decide when it runs (``sweep``), and so is the outbox
relay (tests/e2e/test_relay*.py run servers with it, as `slotward serve` does).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import logging
import shutil
import sqlite3
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from sqlalchemy import Engine, create_engine, inspect, text
from sqlalchemy.pool import NullPool

from slotward.api.bootstrap import Services, bootstrap, open_store
from slotward.api.cli.serving import STOP_SECONDS
from slotward.api.config import Config
from slotward.api.http.app import build_app
from slotward.api.http.edges import build_runner
from slotward.api.keys import create_key
from slotward.api.logs import configure_logging
from slotward.api.workers.sweeper import sweep_once
from slotward.engine.clock import FixedClock
from slotward.engine.model import Principal, Role
from slotward.engine.ports import Store
from tests.conftest import SHARED
from tests.pgserver import PgServer

START = datetime(2030, 10, 1, 9, 0, tzinfo=UTC)


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def replayed(self) -> bool:
        return self.headers.get("Idempotent-Replayed") == "true"

    @property
    def key(self) -> str | None:
        return self.headers.get("Idempotency-Key")


class Client:
    """One API key talking to the server over real HTTP."""

    def __init__(self, session: aiohttp.ClientSession, base: str, secret: str | None) -> None:
        self._session = session
        self._base = base
        self.secret = secret

    def _headers(self, extra: dict[str, str] | None) -> dict[str, str]:
        headers = {"Authorization": f"Bearer {self.secret}"} if self.secret else {}
        return {**headers, **(extra or {})}

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        raw: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> Answer:
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        async with self._session.request(
            method, self._base + path, data=data, headers=self._headers(headers)
        ) as resp:
            return Answer(resp.status, dict(resp.headers), await resp.read())

    async def open_stream(self, path: str, headers: dict[str, str] | None = None) -> Answer:
        """GET ``path``, waiting for its head only if it answers an event stream (which
        stays open: it is closed here, its body unread); any other answer is read whole."""
        async with self._session.get(self._base + path, headers=self._headers(headers)) as resp:
            if resp.content_type == "text/event-stream":
                return Answer(resp.status, dict(resp.headers), b"")
            return Answer(resp.status, dict(resp.headers), await resp.read())

    async def post(self, path: str, body: Any = None, **kw: Any) -> Answer:
        return await self.request("POST", path, body, **kw)

    async def get(self, path: str, **kw: Any) -> Answer:
        return await self.request("GET", path, **kw)

    async def create(self, body: dict[str, Any], **kw: Any) -> Answer:
        return await self.post("/v1/holds", body, **kw)

    async def commit(self, hold_id: str, token: int, **kw: Any) -> Answer:
        return await self.post(f"/v1/holds/{hold_id}/commit", {"token": token}, **kw)

    async def release(self, hold_id: str, **kw: Any) -> Answer:
        return await self.post(f"/v1/holds/{hold_id}/release", **kw)


@dataclass
class Server:
    services: Services
    clock: FixedClock
    db: Engine  # a plain synchronous connection to the same database, for checks
    base: str
    session: aiohttp.ClientSession

    async def key(
        self, tenant: str = "acme", agent: str = "agent-a", role: Role = "agent", priority: int = 50
    ) -> Client:
        principal = Principal(tenant, agent, role, priority)
        hasher = self.services.keys.hasher  # the server's own, as `keys create` would use
        made = await self.services.store.write(
            lambda uow: create_key(uow, principal, self.clock, self.services.ids, hasher)
        )
        return Client(self.session, self.base, made.secret)

    def anonymous(self) -> Client:
        return Client(self.session, self.base, None)

    async def sweep(self) -> int:
        return await sweep_once(self.services)

    def sql(self, query: str, *params: Any) -> list[tuple[Any, ...]]:
        """Run SQL on the database directly, as an operator would (``?`` placeholders)."""
        parts = query.split("?")
        named = "".join(f"{part}:p{i}" for i, part in enumerate(parts[:-1])) + parts[-1]
        with self.db.begin() as conn:
            result = conn.execute(text(named), {f"p{i}": v for i, v in enumerate(params)})
            return [tuple(row) for row in result] if result.returns_rows else []

    def table_counts(self) -> dict[str, int]:
        """Row counts of every table of the database."""
        names = inspect(self.db).get_table_names()
        return {n: self.sql(f'SELECT count(*) FROM "{n}"')[0][0] for n in names}

    def counts(self) -> dict[str, int]:
        tables = ("holds", "ledger", "audit_log", "outbox", "hold_attendees", "attendees")
        return {t: self.sql(f"SELECT count(*) FROM {t}")[0][0] for t in tables}

    def overlapping_pairs(self) -> int:
        """Pairs of live or committed holds of one attendee that overlap."""
        now_us = int((self.clock.now() - datetime(1970, 1, 1, tzinfo=UTC)).total_seconds() * 1e6)
        with self.db.connect() as conn:
            return int(conn.execute(text(overlaps_query(":now")), {"now": now_us}).scalar_one())


async def until(predicate: Callable[[], bool]) -> None:
    """Wait (bounded, about 10 s) until ``predicate`` holds: readiness, not a timing check."""
    for _ in range(2000):
        if predicate():
            return
        await asyncio.sleep(0.005)
    raise AssertionError("condition never reached")


def overlaps_query(now: str) -> str:
    """SQL counting pairs of live or committed holds of one attendee that overlap.

    ``now`` is an SQL expression for the current instant in microseconds.
    """
    live = f"(h.status = 'committed' OR (h.status = 'held' AND h.expires_us > {now}))"
    return f"""
        SELECT count(*) FROM hold_attendees a
        JOIN hold_attendees b ON a.tenant = b.tenant AND a.attendee = b.attendee
             AND a.hold_id < b.hold_id AND a.start_us < b.end_us AND b.start_us < a.end_us
        JOIN holds ha ON ha.id = a.hold_id JOIN holds hb ON hb.id = b.hold_id
        WHERE {live.replace("h.", "ha.")} AND {live.replace("h.", "hb.")}
    """


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock(START)


@pytest.fixture
def config_overrides() -> dict[str, Any]:
    """Override in a test module to run the server with other settings."""
    return {}


@pytest.fixture
def store_wrapper() -> Callable[[Store], Store] | None:
    """Override in a test module to put a test device around the real store."""
    return None


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One SQLite file migrated by the real store for the run, as one file (no WAL
    beside it): each scenario gets a copy. Migrating every file anew was most of
    a scenario's setup; the migrations have their own tests (tests/integration)."""
    folder = tmp_path_factory.mktemp("sqlite-template")
    migrated = folder / "migrated.db"

    async def migrate() -> None:
        store = await open_store(Config(db_url=f"sqlite+aiosqlite:///{migrated}"))
        await store.close()

    asyncio.run(migrate())
    template = folder / "template.db"
    with contextlib.closing(sqlite3.connect(migrated)) as conn:
        conn.execute("VACUUM INTO ?", (str(template),))
    return template


@pytest.fixture(params=["sqlite", "postgres"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Engine]]:
    """Every scenario runs on a fresh SQLite file and on a fresh PostgreSQL database."""
    if request.param == "sqlite":
        path = tmp_path / "slotward.db"
        shutil.copyfile(request.getfixturevalue("sqlite_template"), path)
        url, sync_url = f"sqlite+aiosqlite:///{path}", f"sqlite:///{path}"
    else:
        # One migrated database for the run, emptied before each test: creating
        # a database per test cost more than most tests.
        pg: PgServer = request.getfixturevalue("postgres")
        url = pg.url(SHARED)
        sync_url = url.replace("+asyncpg", "+psycopg")
    # The tests read the store often (snapshots, counts); on PostgreSQL a new
    # connection per read cost more than most tests, so one is kept (idle between
    # reads, in no transaction: it holds no lock the server could wait on).
    engine = (
        create_engine(sync_url, poolclass=NullPool)
        if request.param == "sqlite"
        else create_engine(sync_url, pool_size=1, max_overflow=4, pool_pre_ping=True)
    )
    if request.param == "postgres":
        tables = [t for t in inspect(engine).get_table_names() if t != "alembic_version"]
        with engine.begin() as conn:
            for table in tables:
                conn.execute(text(f"DELETE FROM {table}"))
    yield url, engine
    engine.dispose()


@pytest.fixture
async def server(
    database: tuple[str, Engine],
    clock: FixedClock,
    config_overrides: dict[str, Any],
    store_wrapper: Callable[[Store], Store] | None,
) -> AsyncIterator[Server]:
    url, db = database
    config = Config(db_url=url, **config_overrides)
    store = await open_store(config)
    if store_wrapper is not None:
        store = store_wrapper(store)
    services = await bootstrap(config, store=store, clock=clock)
    async with serving(build_app(services, config, sweep=False, relay=False), config) as base:
        connector = aiohttp.TCPConnector(limit=200)
        async with aiohttp.ClientSession(connector=connector) as session:
            yield Server(services, clock, db, base, session)


@contextlib.asynccontextmanager
async def serving(app: web.Application, config: Config | None = None) -> AsyncIterator[str]:
    """Serve ``app`` on a free loopback port as `slotward serve` does; yield its base URL.

    The runner is production's (api/http/edges.py: timeouts, connection cap, parser
    refusals), with ``config``'s edge settings (the defaults without one). Not
    aiohttp's TestServer: that one cancels a handler whose client hangs up, and
    production (like aiohttp's default) lets it run on.
    """
    runner = build_runner(app, config or Config(), shutdown_timeout=STOP_SECONDS)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    try:
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()


HOLD_BODY: dict[str, Any] = {
    "workflow_id": "wf-42",
    "step": 3,
    "attendees": ["alex@example.com"],
    "start": "2030-10-14T14:00:00Z",
    "duration_minutes": 30,
    "title": "Strategy Sync with Alex",
}


@pytest.fixture
def hold_body() -> dict[str, Any]:
    return dict(HOLD_BODY)


@pytest.fixture
def log_stream() -> Iterator[io.StringIO]:
    """slotward's own logging setup (JSON, DEBUG) writing to a string."""
    root, own = logging.getLogger(), logging.getLogger("slotward")
    handlers, level, own_level = list(root.handlers), root.level, own.level
    stream = io.StringIO()
    configure_logging(Config(log_format="json", log_level="DEBUG"), stream)
    yield stream
    root.handlers[:] = handlers
    root.setLevel(level)
    own.setLevel(own_level)
