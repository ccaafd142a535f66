"""Two server processes on one PostgreSQL, raced by clients whose holds share some
attendees and not others.

A create locks its attendees, not its tenant (adapters/store/postgres/locks.py):
claims on disjoint attendees run side by side, claims sharing one run one after
the other, a preemption locks the loser's other attendees too, and the tenant's
audit chain is ordered at its head. Each claim takes two neighbours of a ring
of people, at one of two overlapping times, at one of three priorities, so
claims collide on one attendee and not the other, and a winner preempts losers
whose other attendee it never asked for. A third of the calls are sent twice
at once. Afterwards: no two live or committed holds of an attendee overlap, one
hold per intent, no hold has an event twice, preemption only by a strictly
higher priority, the audit chain verifies, and the history checker
(``slotward.testing.history``) finds every answer consistent with the database.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import random
import subprocess
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from slotward.testing.history import Call, check
from slotward.testing.snapshot import load_snapshot
from tests.conftest import TEMPLATE
from tests.e2e.test_multiprocess import (
    BAD_PREEMPTIONS,
    CLI,
    DOUBLED_EVENTS,
    OVERLAPS,
    PER_INTENT,
    _free_port,
    _keys,
    _post,
    _post_get,
    wait_until_all_listen,
)
from tests.pgserver import PgServer

WORKERS = 2
PEOPLE = 12  # a ring: claim i takes person i and person i + 1
CLIENTS = 240
_DATABASES = itertools.count()


@pytest.fixture
def two_processes(postgres: PgServer, tmp_path: Path) -> Iterator[tuple[str, str]]:
    url = postgres.create_database(f"attendee_race_{next(_DATABASES)}", template=TEMPLATE)
    port = _free_port()
    log = (tmp_path / "cluster.log").open("w")  # a file, never a pipe nobody drains
    proc = subprocess.Popen(
        [*CLI, "--db", url, "serve", "--port", str(port), "--workers", str(WORKERS)],
        stdout=log,
        stderr=subprocess.STDOUT,
        # Long waits: this test is about what the locks promise, not how long
        # one may be waited for on a loaded machine (tests/e2e/test_store_waits.py).
        env={**os.environ, "SLOTWARD_STORE_TIMEOUT": "120", "SLOTWARD_LOCK_TIMEOUT": "60"},
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_all_listen(base, proc, WORKERS)
        yield base, url
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        log.close()


def _claim(i: int, rng: random.Random) -> tuple[int, dict[str, Any]]:
    """(agent index, call): two ring neighbours, at 10:00 or 10:30 for an hour."""
    person = rng.randrange(PEOPLE)
    pair = [f"p{person}@example.com", f"p{(person + 1) % PEOPLE}@example.com"]
    minute = rng.choice(["00", "30"])
    return i % 30, {
        "workflow_id": f"wf-{i}",
        "step": 1,
        "attendees": pair,
        "start": f"2031-06-03T10:{minute}:00Z",
        "duration_minutes": 60,
        "title": f"meeting {i}",
    }


def _database_checks(url: str) -> dict[str, int]:
    engine = create_engine(url.replace("+asyncpg", "+psycopg"), poolclass=NullPool)
    try:
        with engine.connect() as conn:
            found = {
                name: int(conn.execute(text(sql)).scalar_one())
                for name, sql in {
                    "overlaps": OVERLAPS,
                    "per_intent": PER_INTENT,
                    "doubled_events": DOUBLED_EVENTS,
                    "bad_preemptions": BAD_PREEMPTIONS,
                    "preempted": "SELECT count(*) FROM holds WHERE status = 'preempted'",
                    "seq_gaps": (
                        "SELECT count(*) FROM audit_log a WHERE a.seq > 1 AND NOT EXISTS "
                        "(SELECT 1 FROM audit_log b WHERE b.tenant = a.tenant "
                        "AND b.seq = a.seq - 1 AND b.hash = a.prev_hash)"
                    ),
                }.items()
            }
    finally:
        engine.dispose()
    return found


async def test_holds_sharing_some_attendees_race_across_two_processes(
    two_processes: tuple[str, str],
) -> None:
    base, url = two_processes
    rng = random.Random(16)
    priorities = [rng.choice([10, 50, 90]) for _ in range(30)]
    keys = await _keys(url, priorities)
    plan = [_claim(i, rng) for i in range(CLIENTS)]
    calls = [(i, a, body) for i, (a, body) in enumerate(plan)]
    calls += [(i, a, body) for i, (a, body) in enumerate(plan) if i % 3 == 0]  # sent twice
    rng.shuffle(calls)
    history: list[Call] = []
    connector = aiohttp.TCPConnector(force_close=True, limit=CLIENTS)
    async with aiohttp.ClientSession(connector=connector) as session:
        answers = await asyncio.gather(
            *(
                _post(
                    session,
                    f"{base}/v1/holds",
                    keys[a],
                    body,
                    (history, "create", a, None, f"create wf-{i}"),
                )
                for i, a, body in calls
            )
        )
        verified = await _post_get(session, f"{base}/v1/audit/verify", keys[0])
    statuses = {answer["status"] for answer in answers}
    assert statuses <= {201, 409}, statuses
    assert 201 in statuses
    assert 409 in statuses
    found = _database_checks(url)
    assert found["overlaps"] == 0, found
    assert found["per_intent"] == 1, found
    assert found["doubled_events"] == 0, found
    assert found["bad_preemptions"] == 0, found
    assert found["seq_gaps"] == 0, found  # one chain: every entry follows the one before
    assert found["preempted"] > 0, found  # the race did preempt across attendees
    assert verified["ok"] is True, verified
    assert verified["count"] > 0
    assert check(history, load_snapshot(url), datetime.now(UTC)) == []
