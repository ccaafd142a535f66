"""Fill a slotward database with N stored holds, as if they had been made through the API.

    seeded = seed_holds("sqlite:///bench.db", 1_000_000)
    # claims on seeded.attendees from seeded.free_from on meet no seeded hold

For ``slotward bench scale``: claim latency measured against 10k, 100k and 1M
stored holds needs databases that look like ones where those holds were really
made, built in seconds to minutes instead of hours. Every table a hold's life
writes is filled as the use cases fill it (see :mod:`.seed_plan` for the story,
:mod:`.seed_rows` for the rows):

- ``holds`` and ``hold_attendees`` (one attendee per hold; ``active`` for held
  and committed holds), the directory (``attendees``, ``attendee_emails``: each
  email registered on first use under its derived id);
- ``ledger``: the create's record with its stored 201 answer, and one record per
  commit and per release (200), under the keys the engine derives. They replay:
  the same create call (workflow, step, attendee email, start and end) answers
  the stored body, ``Idempotent-Replayed: true``; a seeded ``step`` of None is
  a call without ``step``. Each expires 72 h after it was written (the default
  retention); the oldest is ~59 h old, so the sweeper purges nothing for the
  first ~13 h;
- ``audit_log`` and ``audit_heads``: one hash chain over every event, in time
  order, that ``GET /v1/audit/verify`` accepts;
- ``outbox``: one event per state change, numbered per hold (``holds.event_seq``
  is the last number), fanned out and delivered when written: what the relay
  leaves of an event with no webhook subscription to send it to (none is
  seeded), so a server started on the seeded store has no backlog to work off.

Not seeded: ``api_keys`` (the benchmark makes its own), ``workflow_stats`` and
``workflow_replays`` (only replays write them). So for 1M holds there are about
1.95M ledger records and 2.02M audit entries and outbox events. No held hold is
past its expiry unswept: the first sweep finds nothing to do until the few
still-held holds expire, 50-60 min after seeding.

The database must be migrated or empty (it is migrated here), with no server on
it, and must not hold data of ``tenant`` yet. Rows are inserted in the order
the service would have inserted them, indexes in place, so tables and indexes
grow as they would have. SQLite is written with the stdlib ``sqlite3`` in one
transaction (rollback journal in memory and ``synchronous=OFF`` meanwhile, so
a seeding process killed halfway leaves a file to delete; back to WAL and
checkpointed after), PostgreSQL with asyncpg's COPY in one transaction; both
end with ``ANALYZE`` (PostgreSQL: ``VACUUM ANALYZE``, as autovacuum would have
done by then). Rows are built on a thread of their own while the database
writes the previous batch. 1M holds take about two minutes on either (2 cores)
and some 6 GB.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import queue
import random
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

import asyncpg  # type: ignore[import-untyped]  # ships no type information

from slotward.adapters.store.instants import from_us, to_us
from slotward.adapters.store.sqlite.store import sqlite_path
from slotward.api.bootstrap import migrate
from slotward.api.config import Config
from slotward.benchmarks.seed_plan import plan_holds
from slotward.benchmarks.seed_rows import COLUMNS, Rows, SeedRows
from slotward.engine.rules.attendees import attendee_id_for_email

__all__ = ["Seeded", "seed_holds"]

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Seeded:
    """What was seeded, and where a benchmark may claim freely.

    ``free_from`` is on the 15-minute grid, 30-45 min after seeding began:
    a claim at or after it, on any of ``attendees``, overlaps no seeded hold,
    and it is far enough ahead that such claims do not start in the past.
    """

    holds: int
    tenant: str
    attendees: tuple[str, ...]  # the attendee emails that carry seeded holds
    free_from: datetime  # UTC
    seconds: float  # how long seeding took
    rows: Mapping[str, int]  # rows written per table


def seed_holds(
    db_url: str,
    count: int,
    *,
    tenant: str = "bench",
    holds_per_attendee: int = 100,
    seed: int = 0,
    now: datetime | None = None,
    progress: Progress | None = None,
) -> Seeded:
    """Store ``count`` holds of ``tenant`` over ``ceil(count / holds_per_attendee)`` attendees.

    ``db_url``: ``sqlite:///file`` (or ``sqlite+aiosqlite``) or ``postgresql://``
    (or ``postgresql+asyncpg``). ``now`` (aware; default: the wall clock) is the
    instant the story is told up to; with ``seed`` it fixes every row.
    ``progress``, if given, is called with a line of text now and then. Runs
    its own event loop: from async code, call it through ``asyncio.to_thread``.
    Raises ``ValueError`` when ``tenant`` already has data in the database.
    """
    began = time.perf_counter()
    say = progress or (lambda _: None)
    if now is not None and now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    asyncio.run(migrate(Config(db_url=_async_url(db_url))))
    with _collector_paused():
        plan = plan_holds(count, holds_per_attendee, to_us(now or datetime.now(UTC)),
                          random.Random(seed))  # fmt: skip
        say(f"planned {count:,} holds over {plan.attendees:,} attendees, "
            f"{len(plan.events):,} events")  # fmt: skip
        emails = [f"attendee{i:06d}@example.com" for i in range(plan.attendees)]
        ids = [attendee_id_for_email(tenant, e) for e in emails]
        rows = SeedRows(plan, tenant, emails, ids, random.Random(f"{seed}/{plan.now_us}"))
        if db_url.startswith("postgres"):
            written = asyncio.run(_postgres(_asyncpg_dsn(db_url), rows, say))
        else:
            written = _sqlite(str(sqlite_path(db_url)), rows, say)
    return Seeded(
        holds=count,
        tenant=tenant,
        attendees=tuple(emails),
        free_from=from_us(plan.free_from_us),
        seconds=time.perf_counter() - began,
        rows=written,
    )


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Millions of new tuples and no cycles: collections would only cost time."""
    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


def _async_url(url: str) -> str:
    for plain in ("postgresql://", "postgres://"):
        if url.startswith(plain):
            return "postgresql+asyncpg://" + url.removeprefix(plain)
    return url


def _asyncpg_dsn(url: str) -> str:
    return "postgresql://" + url.split("://", 1)[1]


@contextlib.contextmanager
def _produced(rows: SeedRows, say: Progress) -> Iterator[Iterator[Rows]]:
    """The batches, built on a thread of their own while the caller writes the last one."""
    ready: queue.Queue[Rows | BaseException | None] = queue.Queue(maxsize=2)
    stop = threading.Event()

    def produce() -> None:
        try:
            for batch in rows.batches():
                if stop.is_set():
                    return
                ready.put(batch)
        except BaseException as exc:  # handed to the writer, which raises it
            ready.put(exc)
        ready.put(None)

    def consume() -> Iterator[Rows]:
        done, total = 0, len(rows.plan.events)
        while (item := ready.get()) is not None:
            if isinstance(item, BaseException):
                raise item
            yield item
            done += len(item.tables["audit_log"])
            say(f"wrote {done:,} of {total:,} events")

    thread = threading.Thread(target=produce, name="seed-rows", daemon=True)
    thread.start()
    try:
        yield consume()
    finally:
        stop.set()
        while thread.is_alive():  # a writer that failed leaves the producer blocked on put
            with contextlib.suppress(queue.Empty):
                ready.get(timeout=0.1)
        thread.join()


def _insert(table: str) -> str:
    columns = COLUMNS[table]
    quoted = ", ".join(f'"{c}"' for c in columns)
    return f'INSERT INTO "{table}" ({quoted}) VALUES ({", ".join("?" for _ in columns)})'


def _sqlite(path: str, rows: SeedRows, say: Progress) -> dict[str, int]:
    conn = sqlite3.connect(path, isolation_level=None)
    written = dict.fromkeys(COLUMNS, 0)
    try:
        if conn.execute(_SEEDED.replace("{p}", "?"), (rows.tenant,) * 4).fetchone()[0]:
            raise ValueError(f"tenant {rows.tenant!r} already has data; seed a fresh tenant")
        # The rollback journal in memory, not WAL, while seeding: a transaction far
        # larger than the cache spills pages into the WAL, rewrites them there on
        # every later change and copies them back at the checkpoint (138 s instead
        # of 107 s for 1M holds). The pages written are the same either way.
        conn.execute("PRAGMA journal_mode=MEMORY")
        conn.execute("PRAGMA synchronous=OFF")
        conn.execute("PRAGMA cache_size=-1048576")  # 1 GiB: the ledger's random-keyed indexes
        conn.execute("BEGIN IMMEDIATE")
        with _produced(rows, say) as batches:
            for batch in batches:
                for table, batch_rows in batch.tables.items():
                    conn.executemany(_insert(table), batch_rows)
                    written[table] += len(batch_rows)
        conn.execute("INSERT INTO audit_heads VALUES (?, ?, ?)", (rows.tenant, *rows.head))
        conn.execute("COMMIT")
        say("analyzing")
        conn.execute("ANALYZE")
        conn.execute("PRAGMA journal_mode=WAL")  # as the store keeps it
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    return written


# The server's share of COPY, split over two connections so it uses both cores:
# the overlap check of the exclusion constraint makes hold_attendees the
# costliest table (~40 % of the server's time).
_SIDE: Final = ("hold_attendees", "outbox")


async def _postgres(dsn: str, rows: SeedRows, say: Progress) -> dict[str, int]:
    main, side = await asyncpg.connect(dsn), await asyncpg.connect(dsn)
    written = dict.fromkeys(COLUMNS, 0)
    loop = asyncio.get_running_loop()

    async def copy(conn: Any, batch: Rows, tables: Iterable[str]) -> None:
        for table in tables:
            if batch.tables[table]:
                await conn.copy_records_to_table(
                    table, records=batch.tables[table], columns=COLUMNS[table]
                )
                written[table] += len(batch.tables[table])

    try:
        if await main.fetchval(_SEEDED.replace("{p}", "$1"), rows.tenant):
            raise ValueError(f"tenant {rows.tenant!r} already has data; seed a fresh tenant")
        others = [t for t in COLUMNS if t not in _SIDE]
        with _produced(rows, say) as batches:
            async with main.transaction(), side.transaction():
                while (batch := await loop.run_in_executor(None, next, batches, None)) is not None:
                    await asyncio.gather(copy(main, batch, others), copy(side, batch, _SIDE))
                head = (rows.tenant, *rows.head)
                await main.execute("INSERT INTO audit_heads VALUES ($1, $2, $3)", *head)
        say("vacuuming and analyzing")
        await main.execute("VACUUM ANALYZE")
    finally:
        await asyncio.gather(main.close(), side.close())
    return written


_SEEDED = " OR ".join(
    f"EXISTS (SELECT 1 FROM {table} WHERE tenant = {{p}})"
    for table in ("audit_heads", "holds", "attendees", "ledger")
)
_SEEDED = f"SELECT {_SEEDED}"
