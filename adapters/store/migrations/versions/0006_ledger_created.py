"""A ledger record stores whether its first answer created something, not an HTTP status.

The engine knows no HTTP status (DESIGN section 1): a use case says whether a
call made a new resource, and the HTTP layer answers 201 for that, 200
otherwise. ``ledger.status_code`` becomes ``ledger.created``, keeping every
stored answer's meaning: 201 (a placed hold, a lease taken) is true; 200 (a
commit, a release, a completion) and the 0 an execution held while running
(no answer stored yet) are false. A replay answers with the same status as
before. The downgrade puts the numbers back (0 for a record still executing).

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

_ledger = sa.table(
    "ledger", sa.column("state"), sa.column("status_code"), sa.column("created", sa.Boolean)
)


def upgrade() -> None:
    # Added nullable, filled, then required: one statement rewrites every row.
    with op.batch_alter_table("ledger") as batch:
        batch.add_column(sa.Column("created", sa.Boolean, nullable=True))
    op.execute(_ledger.update().values(created=_ledger.c.status_code == 201))
    with op.batch_alter_table("ledger") as batch:
        batch.alter_column("created", existing_type=sa.Boolean, nullable=False)
        batch.drop_column("status_code")


def downgrade() -> None:
    with op.batch_alter_table("ledger") as batch:
        batch.add_column(sa.Column("status_code", sa.Integer, nullable=True))
    status = sa.case(
        (_ledger.c.created.is_(True), 201), (_ledger.c.state == "executing", 0), else_=200
    )
    op.execute(_ledger.update().values(status_code=status))
    with op.batch_alter_table("ledger") as batch:
        batch.alter_column("status_code", existing_type=sa.Integer, nullable=False)
        batch.drop_column("created")
