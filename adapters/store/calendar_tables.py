"""The calendar providers' tables (migration 0008, issue 15), re-exported by tables.py.

One binding per attendee, the mirror of its busy time, and slotward's own
events to write (one row per hold and attendee, coalescing). Instants are
integer microseconds since the epoch (UTC), as in every table.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, Index, Integer, String, Table, Text, text

from slotward.adapters.store.metadata import metadata

__all__ = ["CALENDAR_WRITE_DELETE", "calendar_bindings", "calendar_busy", "calendar_writes"]

_ROW_ID = BigInteger().with_variant(Integer, "sqlite")

calendar_bindings = Table(
    "calendar_bindings",
    metadata,
    Column("tenant", String(128), primary_key=True),
    Column("attendee", String(128), primary_key=True),
    Column("provider", String(64), nullable=False),
    Column("url", Text, nullable=False),
    Column("username", Text, nullable=True),
    Column("password", Text, nullable=True),  # sealed by the secret box, never clear
    Column("timezone", String(64), nullable=False),
    Column("on_unavailable", String(16), nullable=False),  # fail_closed, last_known
    Column("created_us", BigInteger, nullable=False),
    Column("updated_us", BigInteger, nullable=False),
    Column("status", String(16), nullable=False),  # pending, ok, error
    Column("synced_us", BigInteger, nullable=True),
    Column("covers_from_us", BigInteger, nullable=True),
    Column("covers_until_us", BigInteger, nullable=True),
    Column("cursor", Text, nullable=True),
    Column("version", Integer, nullable=False),
    Column("error", Text, nullable=True),
    Column("error_us", BigInteger, nullable=True),
    Column("failures", Integer, nullable=False),
    Column("next_sync_us", BigInteger, nullable=True),
    Column("sync_owner", String(64), nullable=True),
    Column("sync_until_us", BigInteger, nullable=True),
    Index("ix_calendar_bindings_next_sync", "next_sync_us"),
)

calendar_busy = Table(
    "calendar_busy",
    metadata,
    # Every read of a calendar deletes and inserts its blocks: 2**31 ids would
    # last days on a busy server. BIGINT on PostgreSQL; SQLite's rowid is 64-bit
    # already (and only INTEGER PRIMARY KEY is it).
    Column("id", _ROW_ID, primary_key=True, autoincrement=True),
    Column("tenant", String(128), nullable=False),
    Column("attendee", String(128), nullable=False),
    Column("source", Text, nullable=False),
    Column("start_us", BigInteger, nullable=False),
    Column("end_us", BigInteger, nullable=False),
    Index("ix_calendar_busy_attendee_start", "tenant", "attendee", "start_us"),
    Index("ix_calendar_busy_source", "tenant", "attendee", "source"),
)

calendar_writes = Table(
    "calendar_writes",
    metadata,
    Column("tenant", String(128), primary_key=True),
    Column("hold_id", String(64), primary_key=True),
    Column("attendee", String(128), primary_key=True),
    Column("uid", String(128), nullable=False),
    Column("action", String(8), nullable=False),  # put, delete
    Column("status", String(16), nullable=True),  # TENTATIVE, CONFIRMED (a put)
    Column("start_us", BigInteger, nullable=False),
    Column("end_us", BigInteger, nullable=False),
    Column("summary", Text, nullable=False),
    Column("description", Text, nullable=False),
    Column("version", Integer, nullable=False),
    Column("state", String(16), nullable=False),  # pending, delivered, dead
    Column("attempts", Integer, nullable=False),
    Column("next_attempt_us", BigInteger, nullable=False),
    Column("updated_us", BigInteger, nullable=False),
    Column("claim_owner", String(64), nullable=True),
    Column("claim_until_us", BigInteger, nullable=True),
    Column("written_us", BigInteger, nullable=True),
    Column("last_error", Text, nullable=True),
    Index("ix_calendar_writes_state_next", "state", "next_attempt_us"),
)
# The deletes of events from calendars, by state and when written: the sweeper
# purges those delivered long enough ago (migration 0011). Its statement names
# the condition as written here, which lets SQLite use the partial index.
CALENDAR_WRITE_DELETE = "action = 'delete'"
Index(
    "ix_calendar_writes_deletes",
    calendar_writes.c.state,
    calendar_writes.c.written_us,
    sqlite_where=text(CALENDAR_WRITE_DELETE),
    postgresql_where=text(CALENDAR_WRITE_DELETE),
)
