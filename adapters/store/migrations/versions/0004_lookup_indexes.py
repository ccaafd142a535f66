"""Two lookups keep to their indexes however many rows a tenant has.

- ``find_live_intent`` asks for the oldest live hold of one (tenant, workflow,
  intent) ordered by id. With an index on (tenant, workflow_id, intent_fp)
  only, SQLite preferred walking ``ix_holds_tenant_id`` in id order until a
  match: a scan of the tenant's holds on every create. With ``id`` in the
  index the order comes with it and the search is a seek.
- The retention purge asks for one tenant's records past expiry; SQLite took
  ``ix_ledger_tenant_workflow`` and filtered every record of the tenant, on
  the writer. An index on (tenant, expires_us) makes it a range seek.

tests/integration/test_query_plans.py keeps every prebuilt statement on an index.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""

from __future__ import annotations

from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.drop_index("ix_holds_tenant_workflow_intent", table_name="holds")
    op.create_index(
        "ix_holds_tenant_workflow_intent_id", "holds", ["tenant", "workflow_id", "intent_fp", "id"]
    )
    op.create_index("ix_ledger_tenant_expires", "ledger", ["tenant", "expires_us"])


def downgrade() -> None:
    op.drop_index("ix_ledger_tenant_expires", table_name="ledger")
    op.drop_index("ix_holds_tenant_workflow_intent_id", table_name="holds")
    op.create_index(
        "ix_holds_tenant_workflow_intent", "holds", ["tenant", "workflow_id", "intent_fp"]
    )
