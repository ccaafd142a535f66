"""A seeded database (benchmarks/seed.py) is one the service takes for its own work.

What ``slotward bench scale`` relies on, on a real SQLite file and on the
session PostgreSQL: the tables hold what the seeded calls would have written,
the service's own verifier accepts the audit chain, a claim from ``free_from``
is booked while one over a seeded hold conflicts, a seeded create replays its
stored answer, and the history checker finds the stored history consistent.
The app is the production one over real HTTP, with its clock at the instant
the seeding told its story up to.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.pool import NullPool

from slotward.adapters.store import tables
from slotward.adapters.store.instants import from_us, to_us
from slotward.api.bootstrap import bootstrap, open_store
from slotward.api.client import SlotConflict, Slotward
from slotward.api.config import Config
from slotward.api.http.app import build_app
from slotward.api.keys import create_key
from slotward.benchmarks.seed import Seeded, seed_holds
from slotward.benchmarks.seed_rows import COLUMNS
from slotward.engine.clock import FixedClock
from slotward.engine.model import Principal
from slotward.engine.rules.fingerprint import derive_key, hold_intent
from slotward.engine.rules.timenorm import Interval, format_instant
from slotward.engine.usecases.placing import TOOL
from slotward.testing.history import check
from slotward.testing.snapshot import load_snapshot, sync_url
from tests.conftest import TEMPLATE
from tests.e2e.conftest import serving
from tests.pgserver import PgServer

COUNT = 2000
PER_ATTENDEE = 100
NOW = datetime(2030, 10, 1, 9, 0, 1, tzinfo=UTC)
_NAMES = itertools.count(1)


@dataclasses.dataclass
class Db:
    url: str
    seeded: Seeded
    engine: Engine

    def sql(self, query: str, **params: Any) -> list[Any]:
        with self.engine.connect() as conn:
            return list(conn.execute(text(query), params))

    def one(self, query: str, **params: Any) -> Any:
        return self.sql(query, **params)[0][0]


@pytest.fixture(params=["sqlite", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Db]:
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'seeded.db'}"
    else:
        pg: PgServer = request.getfixturevalue("postgres")
        url = pg.create_database(f"seeded{next(_NAMES)}", template=TEMPLATE)
    seeded = seed_holds(url, COUNT, holds_per_attendee=PER_ATTENDEE, now=NOW)
    engine = create_engine(sync_url(url), poolclass=NullPool)
    yield Db(url, seeded, engine)
    engine.dispose()


@dataclasses.dataclass
class Api:
    """The Python client for the tools; raw posts where the bytes are what is checked."""

    session: aiohttp.ClientSession
    base: str
    headers: dict[str, str]
    client: Slotward

    async def post(self, path: str, body: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
        url, headers = self.base + path, self.headers
        async with self.session.post(url, data=json.dumps(body), headers=headers) as resp:
            return resp.status, dict(resp.headers), await resp.read()

    async def get(self, path: str) -> Any:
        async with self.session.get(self.base + path, headers=self.headers) as resp:
            assert resp.status == 200
            return await resp.json()


@pytest.fixture
async def api(db: Db) -> AsyncIterator[Api]:
    """The production app on the seeded database, with a priority-0 key of the tenant:
    it never preempts, so any seeded live hold it meets is a conflict."""
    config = Config(db_url=db.url, rate_limit=0)
    clock = FixedClock(NOW + timedelta(seconds=5))
    services = await bootstrap(config, store=await open_store(config), clock=clock)
    hasher = services.keys.hasher
    principal = Principal(db.seeded.tenant, "bench-agent", "agent", 0)
    made = await services.store.write(
        lambda uow: create_key(uow, principal, clock, services.ids, hasher)
    )
    app = build_app(services, config, sweep=False)
    async with serving(app, config) as base, aiohttp.ClientSession() as session:
        client = Slotward(base, made.secret, session=session, retries=0)
        yield Api(session, base, {"Authorization": f"Bearer {made.secret}"}, client)


def test_the_seeded_rows_fill_every_column_of_the_schema() -> None:
    """A column added to the schema must be seeded too (or the seeding fails here)."""
    for table, columns in COLUMNS.items():
        assert set(columns) == set(tables.metadata.tables[table].columns.keys()), table


def test_every_table_holds_what_the_seeded_calls_wrote(db: Db) -> None:
    counts = {t: db.one(f"SELECT count(*) FROM {t}") for t in db.seeded.rows}
    assert counts == db.seeded.rows
    attendees = COUNT // PER_ATTENDEE
    assert len(db.seeded.attendees) == attendees == counts["attendees"]
    assert counts["holds"] == counts["hold_attendees"] == COUNT
    assert counts["attendee_emails"] == attendees
    by_status = dict(db.sql("SELECT status, count(*) FROM holds GROUP BY status"))
    assert set(by_status) == {"held", "committed", "released", "expired", "preempted"}
    assert by_status["committed"] > 0.8 * COUNT
    # A create writes a record; so does every commit and every release.
    committed = db.one("SELECT count(*) FROM holds WHERE committed_us IS NOT NULL")
    assert counts["ledger"] == COUNT + committed + by_status["released"]
    # Each of them is an audit entry, as is every expiry and preemption;
    # every entry has its outbox event.
    assert counts["audit_log"] == counts["ledger"] + by_status["expired"] + by_status["preempted"]
    assert counts["outbox"] == counts["audit_log"]
    assert db.sql("SELECT seq FROM audit_heads") == [(counts["audit_log"],)]


def test_each_holds_events_are_numbered_one_on_and_delivered(db: Db) -> None:
    misnumbered = db.one(
        "SELECT count(*) FROM holds h WHERE h.event_seq != (SELECT count(*) FROM outbox o"
        " WHERE o.hold_id = h.id) OR h.event_seq != (SELECT max(o.seq) FROM outbox o"
        " WHERE o.hold_id = h.id)"
    )
    assert misnumbered == 0
    states = db.sql("SELECT state, fanned, count(*) FROM outbox GROUP BY state, fanned")
    assert [(state, bool(fanned)) for state, fanned, _ in states] == [("delivered", True)]


def test_nothing_is_due_for_the_sweeper_and_nothing_lies_past_free_from(db: Db) -> None:
    free_from = to_us(db.seeded.free_from)
    now = to_us(NOW)
    assert db.seeded.free_from == datetime(2030, 10, 1, 9, 45, tzinfo=UTC)
    assert db.one("SELECT max(end_us) FROM holds") == free_from
    assert db.one("SELECT min(expires_us) FROM holds WHERE status = 'held'") > free_from
    assert db.one("SELECT count(*) FROM ledger WHERE expires_us <= :now", now=now) == 0
    assert db.one("SELECT max(created_us) FROM holds") <= now


async def test_the_service_verifies_the_audit_chain(db: Db, api: Api) -> None:
    verified = await api.get("/v1/audit/verify")
    assert verified["ok"] is True
    assert verified["count"] == db.seeded.rows["audit_log"]


def _claim(email: str, start: datetime, minutes: int = 30) -> dict[str, Any]:
    return {
        "workflow_id": f"bench-{email}-{format_instant(start)}",
        "attendees": [email],
        "start": format_instant(start),
        "duration_minutes": minutes,
        "title": "Benchmark claim",
    }


async def test_claims_from_free_from_are_booked(db: Db, api: Api) -> None:
    for email in (db.seeded.attendees[0], db.seeded.attendees[-1]):
        hold = await api.client.create_hold(**_claim(email, db.seeded.free_from))
        assert (hold.status, hold.replayed) == ("held", False)


async def test_a_claim_over_a_seeded_committed_hold_conflicts(db: Db, api: Api) -> None:
    # The seeded holds still to come are the ones a claim can meet (earlier ones
    # are in the past, refused before any conflict check).
    rows = db.sql(
        "SELECT e.email, h.start_us FROM holds h JOIN hold_attendees a ON a.hold_id = h.id "
        "JOIN attendee_emails e ON e.attendee_id = a.attendee "
        "WHERE h.status = 'committed' AND h.start_us > :now ORDER BY h.start_us",
        now=to_us(NOW + timedelta(minutes=1)),
    )
    assert rows, "no seeded committed hold still to come"
    email, start_us = rows[0]
    with pytest.raises(SlotConflict) as taken:
        await api.client.create_hold(**_claim(email, from_us(start_us), 15))
    assert {c.kind for c in taken.value.conflict_entries} == {"committed"}


async def test_a_seeded_create_replays_its_stored_answer(db: Db, api: Api) -> None:
    row = db.sql(
        "SELECT h.key, h.workflow_id, h.start_us, h.end_us, a.attendee, e.email, l.body "
        "FROM holds h JOIN hold_attendees a ON a.hold_id = h.id "
        "JOIN attendee_emails e ON e.attendee_id = a.attendee "
        "JOIN ledger l ON l.tenant = h.tenant AND l.key = h.key "
        "WHERE h.status = 'committed' ORDER BY h.created_us LIMIT 1"
    )[0]
    key, workflow, start_us, end_us, attendee, email, stored = row
    intent = hold_intent([attendee], Interval(from_us(start_us), from_us(end_us)))
    step = next(  # the step is part of the key only: find the one that derives it
        s for s in (None, *range(9))
        if derive_key(tenant=db.seeded.tenant, workflow=workflow, tool=TOOL, intent=intent,
                      step=s) == key
    )  # fmt: skip
    body = {
        "workflow_id": workflow,
        "attendees": [email.upper()],  # rephrased: the same intent
        "start": format_instant(from_us(start_us)),
        "end": format_instant(from_us(end_us)),
        "title": "A retry, reworded",
        **({} if step is None else {"step": step}),
    }
    status, headers, answer = await api.post("/v1/holds", body)
    assert (status, headers["Idempotent-Replayed"], headers["Idempotency-Key"]) == (
        201,
        "true",
        key,
    )
    assert answer == bytes(stored)


def test_the_history_checker_finds_the_seeded_history_consistent(db: Db) -> None:
    snapshot = load_snapshot(db.url)
    assert len(snapshot.holds) == COUNT
    violations = check([], snapshot, NOW)
    # The checker takes the calls it is given as the whole history, so without
    # them it misses every commit's answer; nothing else may be reported.
    unanswered = [v for v in violations if v.detail.endswith("is committed but no commit said so")]
    assert [v for v in violations if v not in unanswered] == []
    assert len(unanswered) == sum(h.committed_at is not None for h in snapshot.holds)


def test_seeding_refuses_a_tenant_that_already_has_data(db: Db) -> None:
    with pytest.raises(ValueError, match="already has data"):
        seed_holds(db.url, 10, now=NOW)
    other = seed_holds(db.url, 10, tenant="other", now=NOW)
    assert db.one("SELECT count(*) FROM holds WHERE tenant = 'other'") == other.holds == 10
