"""An index of the calendar deletes written, for the sweeper's purge.

The sweeper deletes, a batch at a time, the calendar writes that deleted an
event and were written longer than the retention ago. Its statement read
them by ``ix_calendar_writes_state_next`` (state, next attempt): every write
delivered, puts included, sorted whole by when it was written, each sweep,
however few were old enough (issue 16; tests/integration/test_query_plans.py
now refuses a sweeper's batch that sorts all its matches). The new index
holds the deletes alone, by state and when they were written: a sweep reads
the delivered ones old enough, in order, and stops at its limit. Its
condition is written as the statement names it (tables.py
``CALENDAR_WRITE_DELETE``), which is what lets SQLite use a partial index.
The downgrade drops it.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

NAME = "ix_calendar_writes_deletes"
CONDITION = "action = 'delete'"  # tables.py CALENDAR_WRITE_DELETE


def upgrade() -> None:
    where = sa.text(CONDITION)
    op.create_index(
        NAME, "calendar_writes", ["state", "written_us"], sqlite_where=where, postgresql_where=where
    )


def downgrade() -> None:
    op.drop_index(NAME, table_name="calendar_writes")
