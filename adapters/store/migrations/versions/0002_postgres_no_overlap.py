"""PostgreSQL only: no two active rows of one attendee may overlap.

The second line of defence behind the per-tenant write lock: an exclusion
constraint over the active (held or committed) rows of ``hold_attendees``. A
constraint cannot use now(), so expired holds must be marked inactive, by the
sweeper or by the claim that takes their slot (engine/usecases/expiry.py). SQLite has no
such constraint; there a single writer at a time is the guarantee.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from __future__ import annotations

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("CREATE EXTENSION IF NOT EXISTS btree_gist")
    op.execute(
        "ALTER TABLE hold_attendees ADD CONSTRAINT hold_attendees_no_overlap "
        "EXCLUDE USING gist (tenant WITH =, attendee WITH =, "
        "int8range(start_us, end_us) WITH &&) WHERE (active)"
    )


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("ALTER TABLE hold_attendees DROP CONSTRAINT hold_attendees_no_overlap")
