"""The reference server's SQLite store: the create transaction on the stdlib ``sqlite3``.

Set up as slotward's embedded store is (adapters/store/sqlite/store.py): WAL,
``synchronous=NORMAL``, a busy timeout, foreign keys on, pages read through a
memory map, and every transaction opened with ``BEGIN IMMEDIATE`` and run
whole on one dedicated writer thread
(one thread hop per transaction, not one per statement). ``BEGIN IMMEDIATE``
takes the file's write lock before the first read, so the overlap check and
the insert cannot interleave with another writer, in this process or in
another one sharing the file.

Group commit, as slotward's store has it (adapters/store/sqlite/writer.py):
the claims that queue up while a transaction runs are run next, one after
another in one ``BEGIN IMMEDIATE`` transaction, under one ``COMMIT``, and none
is answered before it. Without it the reference would pay a commit per claim
where slotward pays one per group, and the ratio would flatter slotward (a
review measured group commit at 35-40% of slotward's create rate). A claim
here fails only by a database error, which rolls the group back and runs its
claims again one by one: no claim is ever undone alone, so no savepoint is
taken (slotward's writer, whose calls can fail alone, takes them only when one
does). The turn (below) is given back before the answers, as slotward's.
WAL checkpoints run on a thread of their own, as slotward's do
(adapters/store/sqlite/checkpoint.py), not inside a commit. And the processes
sharing a file take their turns to write by a lock file, as slotward's
writers do (adapters/store/sqlite/turns.py), not by SQLite's busy handler alone.
"""

from __future__ import annotations

import asyncio
import functools
import json
import queue
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from slotward.adapters.store.sqlite.checkpoint import Checkpointer
from slotward.adapters.store.sqlite.store import MMAP_BYTES
from slotward.adapters.store.sqlite.turns import WriterTurn
from slotward.benchmarks.reference_model import (
    CONFLICT,
    GENESIS,
    HOLD_TTL_US,
    MAX_HOLD_US,
    RETENTION_US,
    Claim,
    Unavailable,
    hold_document,
    next_audit,
    schema,
)

__all__ = ["SqliteReference", "create_sqlite_schema", "sqlite_file"]

BUSY_TIMEOUT_MS = 5000  # slotward's default lock wait (SLOTWARD_LOCK_TIMEOUT)
_PREFIXES = ("sqlite:///", "sqlite+aiosqlite:///", "sqlite+pysqlite:///")

_REPLAY = "SELECT body FROM ref_idempotency WHERE tenant = ? AND key = ?"
_HOLD = "INSERT INTO ref_holds VALUES (?, ?, ?, ?, ?, ?, ?, 'held', ?, 1, ?)"
_ATTENDEE = "INSERT INTO ref_hold_attendees VALUES (?, ?, ?, ?, ?, 1)"
_RECORD = "INSERT INTO ref_idempotency VALUES (?, ?, 201, ?, ?, ?, ?)"
_HEAD = "SELECT seq, hash FROM ref_audit WHERE tenant = ? ORDER BY seq DESC LIMIT 1"
_AUDIT = "INSERT INTO ref_audit VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
_OUTBOX = "INSERT INTO ref_outbox VALUES (?, ?, 'hold.created', ?, ?, 'pending', 0, ?, ?)"


@functools.lru_cache(maxsize=128)
def _overlap(attendees: int) -> str:
    """Is any attendee in an active, unexpired hold overlapping [start, end)?

    Holds last at most MAX_HOLD_US, so one that overlaps starts after
    start - MAX_HOLD_US: the bounded scan of slotward's ``_OVERLAPPING``.
    """
    marks = ", ".join("?" * attendees)
    return f"""
        SELECT 1 FROM ref_hold_attendees a JOIN ref_holds h ON h.id = a.hold_id
        WHERE a.tenant = ? AND a.attendee IN ({marks}) AND a.start_us < ?
          AND a.start_us > ? AND a.end_us > ? AND a.active = 1
          AND (h.status = 'committed' OR h.expires_us > ?)
        LIMIT 1"""


def sqlite_file(url: str) -> str | None:
    """The file of a ``sqlite:///`` URL (any driver suffix), or None for another URL."""
    for prefix in _PREFIXES:
        if url.startswith(prefix) and url[len(prefix) :] not in ("", ":memory:"):
            return url[len(prefix) :]
    return None


def _connect(path: str) -> sqlite3.Connection:
    # isolation_level=None: we issue BEGIN IMMEDIATE ourselves, not the module.
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    conn.execute("PRAGMA foreign_keys=ON")
    conn.execute(f"PRAGMA mmap_size={MMAP_BYTES}")  # as slotward's store reads its pages
    return conn


def create_sqlite_schema(path: str) -> None:
    """Create the ``ref_`` tables in the file at ``path`` if they are missing."""
    conn = _connect(path)
    try:
        conn.execute("PRAGMA busy_timeout=600000")  # another process may be creating them
        conn.execute("BEGIN IMMEDIATE")
        for statement in schema("BLOB"):
            conn.execute(statement)
        conn.execute("COMMIT")
    finally:
        conn.close()


def _create(conn: sqlite3.Connection, claim: Claim) -> tuple[int, bytes]:
    """The statements of one create, inside the caller's transaction."""
    tenant = claim.tenant
    stored = conn.execute(_REPLAY, (tenant, claim.key)).fetchone()
    if stored is not None:
        return 200, bytes(stored[0])
    now = time.time_ns() // 1000  # read after BEGIN IMMEDIATE: no stale time after a wait
    span = (claim.start_us, claim.end_us)
    probe = (tenant, *claim.attendees, claim.end_us, claim.start_us - MAX_HOLD_US,
             claim.start_us, now)  # fmt: skip
    if conn.execute(_overlap(len(claim.attendees)), probe).fetchone() is not None:
        return 409, CONFLICT
    hold_id, expires = uuid.uuid4().hex, now + HOLD_TTL_US
    body = hold_document(claim, hold_id, expires)
    attendees = json.dumps(list(claim.attendees))
    conn.execute(_HOLD, (hold_id, tenant, claim.workflow_id, claim.key, attendees, *span,
                         expires, now))  # fmt: skip
    conn.executemany(_ATTENDEE, [(hold_id, a, tenant, *span) for a in claim.attendees])
    conn.execute(_RECORD, (tenant, claim.key, body, hold_id, now, now + RETENTION_US))
    head = conn.execute(_HEAD, (tenant,)).fetchone()
    e = next_audit((0, GENESIS) if head is None else (head[0], head[1]), claim, hold_id, now)
    conn.execute(_AUDIT, (e.tenant, e.seq, e.at_us, e.actor, e.action, e.key, e.hold_id,
                          e.outcome, e.prev_hash, e.hash))  # fmt: skip
    conn.execute(_OUTBOX, (uuid.uuid4().hex, tenant, hold_id, body.decode(), now, now))
    return 201, body


# A queued claim: the claim, and how to hand back (ok, answer or exception).
_Item = tuple[Claim, Callable[[bool, Any], None]]
MAX_GROUP = 32  # as slotward's writer


class SqliteReference:
    """Runs the creates on one writer thread, the queued ones under one COMMIT."""

    def __init__(self, path: str) -> None:
        self._conn = _connect(path)
        self._conn.execute("PRAGMA wal_autocheckpoint=0")  # the checkpointer's job
        self._checkpointer = Checkpointer(functools.partial(_connect, path))
        self._turn = WriterTurn(Path(path))
        self._queue: queue.SimpleQueue[_Item | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name="reference-writer", daemon=True)
        self._thread.start()

    async def create(self, claim: Claim) -> tuple[int, bytes]:
        """The answer to ``claim``: (201, new hold), (200, stored answer) or (409, conflict)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[tuple[int, bytes]] = loop.create_future()

        def settle(ok: bool, value: Any) -> None:
            loop.call_soon_threadsafe(_settle, future, ok, value)

        self._queue.put((claim, settle))
        return await future

    def _loop(self) -> None:
        while (first := self._queue.get()) is not None:
            group = [first]
            while len(group) < MAX_GROUP:
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    self._queue.put(None)
                    break
                group.append(more)
            with self._turn:
                answers = self._group(group) if len(group) > 1 else None
                if answers is None:  # alone, or again alone after an error
                    answers = [self._alone(claim) for claim, _ in group]
            for (_, settle), answer in zip(group, answers, strict=True):
                settle(*answer)
        self._conn.close()
        self._turn.close()

    def _group(self, group: list[_Item]) -> list[tuple[bool, Any]] | None:
        """Run ``group`` under one COMMIT: its answers, or None (nothing kept) on an error."""
        conn = self._conn
        try:
            conn.execute("BEGIN IMMEDIATE")
            answers = [(True, _create(conn, claim)) for claim, _ in group]
            conn.execute("COMMIT")
        except sqlite3.Error:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            return None
        return answers

    def _alone(self, claim: Claim) -> tuple[bool, Any]:
        try:
            return True, self._transaction(claim)
        except Exception as exc:
            return False, exc

    def _transaction(self, claim: Claim) -> tuple[int, bytes]:
        conn = self._conn
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                answer = _create(conn, claim)
                conn.execute("COMMIT")
            finally:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
        except sqlite3.OperationalError as exc:  # locked past the busy timeout, disk full
            raise Unavailable(str(exc)) from exc
        return answer

    async def close(self) -> None:
        self._checkpointer.close()
        self._queue.put(None)
        await asyncio.to_thread(self._thread.join)


def _settle(future: asyncio.Future[tuple[int, bytes]], ok: bool, value: Any) -> None:
    if future.done():
        return
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)
