"""Calendar providers: bindings, the mirror of their busy time, calendar writes.

Issue 15 binds an attendee to a calendar (``calendar_bindings``, one per
attendee, with its sync state), keeps what the provider sync worker last
read of it (``calendar_busy``, one row per busy block) and the state
slotward's own event of each hold should have in each bound calendar
(``calendar_writes``, one coalescing row per hold and attendee). Three new
tables; nothing existing changes, so the downgrade drops them (what was
bound or mirrored is lost with them).

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

_S = sa.String
_BIG = sa.BigInteger
# BIGINT on PostgreSQL (the mirror is rewritten on every read); SQLite's
# INTEGER PRIMARY KEY is its 64-bit rowid.
_ROW_ID = sa.BigInteger().with_variant(sa.Integer, "sqlite")


def upgrade() -> None:
    op.create_table(
        "calendar_bindings",
        sa.Column("tenant", _S(128), primary_key=True),
        sa.Column("attendee", _S(128), primary_key=True),
        sa.Column("provider", _S(64), nullable=False),
        sa.Column("url", sa.Text, nullable=False),
        sa.Column("username", sa.Text, nullable=True),
        sa.Column("password", sa.Text, nullable=True),
        sa.Column("timezone", _S(64), nullable=False),
        sa.Column("on_unavailable", _S(16), nullable=False),
        sa.Column("created_us", _BIG, nullable=False),
        sa.Column("updated_us", _BIG, nullable=False),
        sa.Column("status", _S(16), nullable=False),
        sa.Column("synced_us", _BIG, nullable=True),
        sa.Column("covers_from_us", _BIG, nullable=True),
        sa.Column("covers_until_us", _BIG, nullable=True),
        sa.Column("cursor", sa.Text, nullable=True),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("error", sa.Text, nullable=True),
        sa.Column("error_us", _BIG, nullable=True),
        sa.Column("failures", sa.Integer, nullable=False),
        sa.Column("next_sync_us", _BIG, nullable=True),
        sa.Column("sync_owner", _S(64), nullable=True),
        sa.Column("sync_until_us", _BIG, nullable=True),
    )
    op.create_index("ix_calendar_bindings_next_sync", "calendar_bindings", ["next_sync_us"])
    op.create_table(
        "calendar_busy",
        sa.Column("id", _ROW_ID, primary_key=True, autoincrement=True),
        sa.Column("tenant", _S(128), nullable=False),
        sa.Column("attendee", _S(128), nullable=False),
        sa.Column("source", sa.Text, nullable=False),
        sa.Column("start_us", _BIG, nullable=False),
        sa.Column("end_us", _BIG, nullable=False),
    )
    op.create_index(
        "ix_calendar_busy_attendee_start", "calendar_busy", ["tenant", "attendee", "start_us"]
    )
    op.create_index("ix_calendar_busy_source", "calendar_busy", ["tenant", "attendee", "source"])
    op.create_table(
        "calendar_writes",
        sa.Column("tenant", _S(128), primary_key=True),
        sa.Column("hold_id", _S(64), primary_key=True),
        sa.Column("attendee", _S(128), primary_key=True),
        sa.Column("uid", _S(128), nullable=False),
        sa.Column("action", _S(8), nullable=False),
        sa.Column("status", _S(16), nullable=True),
        sa.Column("start_us", _BIG, nullable=False),
        sa.Column("end_us", _BIG, nullable=False),
        sa.Column("summary", sa.Text, nullable=False),
        sa.Column("description", sa.Text, nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("state", _S(16), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("next_attempt_us", _BIG, nullable=False),
        sa.Column("updated_us", _BIG, nullable=False),
        sa.Column("claim_owner", _S(64), nullable=True),
        sa.Column("claim_until_us", _BIG, nullable=True),
        sa.Column("written_us", _BIG, nullable=True),
        sa.Column("last_error", sa.Text, nullable=True),
    )
    op.create_index(
        "ix_calendar_writes_state_next", "calendar_writes", ["state", "next_attempt_us"]
    )


def downgrade() -> None:
    for table in ("calendar_writes", "calendar_busy", "calendar_bindings"):
        op.drop_table(table)  # their indexes go with them
