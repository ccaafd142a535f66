"""The baseline servers of `slotward bench baseline`, run as real processes.

The echo server answers a JSON body back. The reference server, the yardstick
slotward's creates are measured against, must do the whole create transaction
correctly or the comparison means nothing: a retry gets the first answer, an
overlap is refused, a race for one slot books it once, and every hold has its
idempotency record, audit entry (in a chain that verifies) and outbox row.
Checked on a SQLite file and on PostgreSQL, with one and with two processes,
reading the tables directly; each server must stop cleanly on SIGTERM.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import itertools
import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.pool import NullPool

from tests.pgserver import PgServer

_DATABASES = itertools.count()
GENESIS = "0" * 64
RACERS = 30
SLOT = {"start": "2031-03-03T10:00:00Z", "duration_minutes": 30}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _wait_until_all_serve(
    base: str, proc: subprocess.Popen[bytes], workers: int, log: Path
) -> set[int]:
    """The pids of the serving processes, once each has answered /healthz."""
    seen: set[int] = set()
    deadline = time.monotonic() + 60
    while len(seen) < workers:  # readiness, bounded; not a timing assertion
        try:
            # A new connection each time: the kernel spreads them over the workers.
            with urllib.request.urlopen(f"{base}/healthz", timeout=1) as resp:
                assert resp.status == 200
                seen.add(json.load(resp)["process"])
        except OSError:
            time.sleep(0.05)
        if proc.poll() is not None or time.monotonic() > deadline:
            started = f"{len(seen)} of {workers} answered"
            raise RuntimeError(f"server did not start ({started}):\n{log.read_text()}")
    return seen


@contextlib.contextmanager
def running(module: str, *args: str, workers: int, log: Path) -> Iterator[str]:
    """``python -m module args --port P --workers N``; yields its base URL.

    On leaving, SIGTERM: the server (and every worker) must stop, exit 0.
    """
    port = _free_port()
    with log.open("w") as out:  # a file, never a pipe nobody drains
        proc = subprocess.Popen(
            [sys.executable, "-m", module, *args, "--port", str(port), "--workers", str(workers)],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        try:
            pids = _wait_until_all_serve(f"http://127.0.0.1:{port}", proc, workers, log)
            yield f"http://127.0.0.1:{port}"
        finally:
            proc.terminate()
            try:
                code = proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                raise
    assert code == 0, log.read_text()
    assert not [pid for pid in pids if _alive(pid)], "a worker outlived its server"


@pytest.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=100)) as s:
        yield s


@pytest.fixture(params=["sqlite", "postgres"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Engine]]:
    """(URL for the server, engine for reading its tables) of a fresh database."""
    if request.param == "sqlite":
        path = tmp_path / "reference.db"
        url, sync_url = f"sqlite:///{path}", f"sqlite:///{path}"
    else:
        pg: PgServer = request.getfixturevalue("postgres")
        url = pg.create_database(f"reference_{next(_DATABASES)}")  # postgresql+asyncpg://
        sync_url = url.replace("+asyncpg", "+psycopg")
    engine = create_engine(sync_url, poolclass=NullPool)
    yield url, engine
    engine.dispose()


def _rows(db: Engine, query: str, **params: Any) -> list[tuple[Any, ...]]:
    with db.connect() as conn:
        return [tuple(r) for r in conn.execute(text(query), params)]


async def _post(
    session: aiohttp.ClientSession, url: str, body: Any, tenant: str | None = None
) -> tuple[int, bytes]:
    headers = {"X-Tenant": tenant} if tenant else {}
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    async with session.post(url, data=data, headers=headers) as resp:
        return resp.status, await resp.read()


@pytest.mark.parametrize("workers", [1, 2])
async def test_echo_answers_the_body_back(
    session: aiohttp.ClientSession, tmp_path: Path, workers: int
) -> None:
    body = {"workflow_id": "wf-1", "attendees": ["a@example.com"], "n": [1, 2.5, None, True]}
    with running("slotward.benchmarks.echo", workers=workers, log=tmp_path / "echo.log") as base:
        async with session.post(f"{base}/echo", json=body) as resp:
            assert resp.status == 200
            assert await resp.json() == body
        async with session.get(f"{base}/healthz") as resp:
            assert resp.status == 200


def _verify_chain(rows: list[tuple[Any, ...]]) -> None:
    """Recompute each tenant's chain: hash = sha256(prev_hash + canonical fields)."""
    heads: dict[str, tuple[int, str]] = {}
    for tenant, seq, at_us, actor, action, key, hold_id, outcome, prev_hash, digest in rows:
        last_seq, last_hash = heads.get(tenant, (0, GENESIS))
        assert (seq, prev_hash) == (last_seq + 1, last_hash)
        fields = {"tenant": tenant, "seq": seq, "at_us": at_us, "actor": actor,
                  "action": action, "key": key, "hold_id": hold_id, "outcome": outcome}  # fmt: skip
        canonical = json.dumps(fields, sort_keys=True, separators=(",", ":"))
        assert digest == hashlib.sha256((prev_hash + canonical).encode()).hexdigest()
        heads[tenant] = (seq, digest)


@pytest.mark.parametrize("workers", [1, 2])
async def test_reference_books_each_slot_once(
    session: aiohttp.ClientSession,
    database: tuple[str, Engine],
    tmp_path: Path,
    workers: int,
) -> None:
    url, db = database
    args = ("--db", url)
    log = tmp_path / "reference.log"
    with running("slotward.benchmarks.reference", *args, workers=workers, log=log) as base:
        holds = f"{base}/v1/holds"
        first = {"workflow_id": "wf-1", "attendees": ["alex@example.com", "bo@example.com"], **SLOT}
        status, created = await _post(session, holds, first)
        assert status == 201
        doc = json.loads(created)
        assert doc["status"] == "held"
        assert doc["attendees"] == ["alex@example.com", "bo@example.com"]
        assert (doc["start"], doc["end"]) == ("2031-03-03T10:00:00Z", "2031-03-03T10:30:00Z")

        # The same call reworded (case, order, offset) is a retry: the first answer, as it was.
        retry = {"workflow_id": "wf-1", "attendees": ["BO@example.com ", "Alex@Example.com"],
                 "start": "2031-03-03T12:00:00+02:00", "duration_minutes": 30}  # fmt: skip
        assert await _post(session, holds, first) == (200, created)
        assert await _post(session, holds, retry) == (200, created)

        overlap = {"workflow_id": "wf-2", "attendees": ["carl@example.com", "bo@example.com"],
                   "start": "2031-03-03T10:15:00Z", "duration_minutes": 60}  # fmt: skip
        assert await _post(session, holds, overlap) == (409, b'{"error":"slot_conflict"}')
        after = {**overlap, "start": "2031-03-03T10:30:00Z"}  # back to back: half-open
        status, back_to_back = await _post(session, holds, after)
        assert status == 201
        answers = [created, back_to_back]
        status, other_tenant = await _post(session, holds, {**first, "workflow_id": "wf-3"}, "t2")
        assert status == 201  # tenants never block each other
        answers.append(other_tenant)

        # Unreadable calls are refused, with nothing stored (_check_tables).
        for bad in _unreadable(first):
            assert await _post(session, holds, bad) == (400, b'{"error":"bad_request"}'), bad

        # Concurrent creates of distinct slots all land, one audit entry each, in one chain
        # (and the server's connections are open before the race).
        crowd = [{"workflow_id": f"crowd-{i}", "attendees": [f"p{i}@example.com"], **SLOT}
                 for i in range(RACERS)]  # fmt: skip
        results = await asyncio.gather(*(_post(session, holds, b) for b in crowd))
        assert [s for s, _ in results] == [201] * RACERS
        answers += [b for _, b in results]

        race = [{"workflow_id": f"race-{i}", "attendees": ["dana@example.com"], **SLOT}
                for i in range(RACERS)]  # fmt: skip
        results = await asyncio.gather(*(_post(session, holds, b) for b in race))
        assert sorted(s for s, _ in results) == [201] + [409] * (RACERS - 1)
        answers += [b for s, b in results if s == 201]

    _check_tables(db, answers)


def _unreadable(call: dict[str, Any]) -> list[Any]:
    return [
        b"{not json",
        [call],
        {k: v for k, v in call.items() if k != "attendees"},
        {**call, "attendees": []},
        {**call, "attendees": ["ok@example.com", 7]},
        {**call, "start": "2031-03-03T10:00:00"},  # no offset
        {**call, "start": "9999-12-31T23:59:00-05:00"},  # past year 9999 in UTC
        {**call, "duration_minutes": 0},
        {**call, "duration_minutes": 1441},  # longer than the overlap scan looks back
        {**call, "duration_minutes": "30"},
        {**call, "workflow_id": "wf\u0000"},
    ]


def _check_tables(db: Engine, answers: list[bytes]) -> None:
    """Every answered hold is stored whole, and nothing else is."""
    by_id = {json.loads(a)["id"]: a for a in answers}
    assert len(by_id) == 4 + RACERS
    holds = _rows(db, "SELECT id, status FROM ref_holds")
    assert sorted(holds) == sorted((i, "held") for i in by_id)
    dana = _rows(db, "SELECT hold_id FROM ref_hold_attendees "
                     "WHERE attendee = 'dana@example.com' AND active")  # fmt: skip
    assert len(dana) == 1  # the race's one winner
    attendees = _rows(db, "SELECT count(*) FROM ref_hold_attendees")
    assert attendees == [(sum(len(json.loads(a)["attendees"]) for a in answers),)]
    records = _rows(db, "SELECT hold_id, status_code, body FROM ref_idempotency")
    assert sorted((h, c, bytes(b)) for h, c, b in records) == sorted(
        (i, 201, a) for i, a in by_id.items()
    )
    audited = _rows(db, "SELECT hold_id, action, outcome FROM ref_audit")
    assert sorted(audited) == sorted((i, "hold.create", "fresh") for i in by_id)
    outbox = _rows(db, "SELECT hold_id, type, state, payload FROM ref_outbox")
    assert sorted(o[:3] for o in outbox) == sorted((i, "hold.created", "pending") for i in by_id)
    assert all(json.loads(payload)["id"] == hold for hold, *_, payload in outbox)
    chain = _rows(db, "SELECT tenant, seq, at_us, actor, action, key, hold_id, outcome, "
                      "prev_hash, hash FROM ref_audit ORDER BY tenant, seq")  # fmt: skip
    _verify_chain(chain)
