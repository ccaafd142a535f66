"""Three of the ledger's indexes keep only the records their lookups ask for.

A create writes one ledger record, and every index of the ledger takes an
entry for it: on SQLite's writer an insert each, and, for an index with random
keys, a page of its own in the group's COMMIT (issue 16). Three lookups ask
for a small part of the records only:

- ``find_by_fingerprint`` (a commit, a release or an approval sent under
  another key than its first call's) finds a record whose key is its
  fingerprint by its primary key; the index keeps only the records stored
  under another key (a client's), which a create without a client key never
  writes. ``ix_ledger_tenant_fingerprint`` was a random key per create.
- ``for_workflow`` reads a workflow's executions: ``kind = 'execution'``.
  ``ix_ledger_tenant_workflow`` was a random key (the workflow) per create.
- the count of leases in flight: ``lease_expires_us IS NOT NULL``.

Each lookup's statement names its index's condition as it is written here,
which is what lets SQLite and PostgreSQL use a partial index
(tests/integration/test_query_plans.py). The downgrade makes them whole again.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

# (name, columns, condition): the same text as tables.py's.
PARTIAL = (
    ("ix_ledger_tenant_fingerprint", ["tenant", "fingerprint"], '"key" <> fingerprint'),
    ("ix_ledger_tenant_workflow", ["tenant", "workflow_id"], "kind = 'execution'"),
    ("ix_ledger_lease", ["lease_expires_us"], "lease_expires_us IS NOT NULL"),
)


def upgrade() -> None:
    for name, columns, condition in PARTIAL:
        op.drop_index(name, table_name="ledger")
        where = sa.text(condition)
        op.create_index(name, "ledger", columns, sqlite_where=where, postgresql_where=where)


def downgrade() -> None:
    for name, columns, _ in PARTIAL:
        op.drop_index(name, table_name="ledger")
        op.create_index(name, "ledger", columns)
