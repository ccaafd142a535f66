"""WAL checkpoints on a real file: by the store's checkpoint thread, never by a commit.

A commit that checkpointed (SQLite's default past 1000 WAL pages) made every
call queued behind SQLite's one writer wait for the copy and the sync. The
database file itself is read with ``immutable=1``, which ignores the WAL: a
row is there only once a checkpoint has copied it.
"""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path

from slotward.adapters.store.sqlite.store import SqliteStore
from slotward.engine.clock import FixedClock, TimeOrderedIds
from slotward.engine.model import Principal
from slotward.engine.rules.attendees import parse_attendees
from slotward.engine.rules.policy import Policy
from slotward.engine.rules.timenorm import normalize_interval
from slotward.engine.usecases.placing import HoldRequest, place_hold

NOW = datetime(2030, 10, 1, 9, 0, tzinfo=UTC)
MAX_HOLD = timedelta(hours=24)
CLOCK = FixedClock(NOW)
IDS = TimeOrderedIds()
GUARD_SECONDS = 30.0  # a bound on waiting for the thread, never a timing assertion


def _create(i: int) -> object:
    req = HoldRequest(
        principal=Principal("acme", "agent-a", "agent", 50),
        workflow_id=f"wf-{i}",
        step=None,
        attendees=parse_attendees([f"person{i}@example.com"]),
        interval=normalize_interval(start="2030-10-14T14:00:00Z", duration_minutes=30),
        title="t",
        description=None,
        priority=50,
        ttl_seconds=300,
    )
    return lambda uow: place_hold(uow, req, Policy(), CLOCK, IDS)


def _in_database_file(path: Path) -> int:
    """Holds in the database file alone, the WAL ignored (0 before the schema is there)."""
    conn = sqlite3.connect(f"file:{path}?immutable=1", uri=True)
    try:
        tables = conn.execute("SELECT name FROM sqlite_master WHERE name = 'holds'").fetchall()
        return int(conn.execute("SELECT count(*) FROM holds").fetchone()[0]) if tables else 0
    finally:
        conn.close()


async def test_commits_never_checkpoint_the_checkpoint_thread_does(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    # A thread that will not run on its own during the test: only commits could checkpoint.
    store = SqliteStore(path, MAX_HOLD, checkpoint_seconds=3600)
    store.migrate()
    try:
        store.checkpoint()  # the schema into the file
        for i in range(300):  # well past SQLite's default of 1000 WAL pages
            await store.write(_create(i))  # type: ignore[arg-type]
        assert _in_database_file(path) == 0  # every hold is still in the WAL only
        store.checkpoint()
        assert _in_database_file(path) == 300
    finally:
        await store.close()


async def test_the_checkpoint_thread_runs_on_its_own(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    store = SqliteStore(path, MAX_HOLD, checkpoint_seconds=0.05)
    store.migrate()
    try:
        for i in range(20):
            await store.write(_create(i))  # type: ignore[arg-type]
        for _ in range(int(GUARD_SECONDS / 0.05)):
            if _in_database_file(path) == 20:
                break
            await asyncio.sleep(0.05)
        assert _in_database_file(path) == 20
    finally:
        await store.close()
