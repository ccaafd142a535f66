"""Three lookups keep to their indexes however many rows a tenant has.

- ``find_live_intent`` asks for the oldest live hold of one (tenant, workflow,
  intent) ordered by id. With an index on (tenant, workflow_id, intent_fp)
  only, SQLite preferred walking ``ix_holds_tenant_id`` in id order until a
  match: a scan of the tenant's holds on every create. With ``id`` in the
  index the order comes with it and the search is a seek.
- The retention purge asks for one tenant's records past expiry; SQLite took
  ``ix_ledger_tenant_workflow`` and filtered every record of the tenant, on
  the writer. An index on (tenant, expires_us) makes it a range seek.
- The overlap check read each candidate's row for ``end_us`` and ``active``:
  some 45 scattered row reads a claim, 5x slower at 1M stored holds than at
  10k. ``ix_hold_attendees_overlap`` now covers the query (found by
  ``slotward bench scale``).

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

# Everything the overlap query reads: it never touches the table.
_COVERING = ["tenant", "attendee", "start_us", "end_us", "active", "hold_id"]


def upgrade() -> None:
    op.drop_index("ix_holds_tenant_workflow_intent", table_name="holds")
    op.create_index(
        "ix_holds_tenant_workflow_intent_id", "holds", ["tenant", "workflow_id", "intent_fp", "id"]
    )
    op.create_index("ix_ledger_tenant_expires", "ledger", ["tenant", "expires_us"])
    op.drop_index("ix_hold_attendees_overlap", table_name="hold_attendees")
    op.create_index("ix_hold_attendees_overlap", "hold_attendees", _COVERING)


def downgrade() -> None:
    op.drop_index("ix_hold_attendees_overlap", table_name="hold_attendees")
    op.create_index(
        "ix_hold_attendees_overlap", "hold_attendees", ["tenant", "attendee", "start_us"]
    )
    op.drop_index("ix_ledger_tenant_expires", table_name="ledger")
    op.drop_index("ix_holds_tenant_workflow_intent_id", table_name="holds")
    op.create_index(
        "ix_holds_tenant_workflow_intent", "holds", ["tenant", "workflow_id", "intent_fp"]
    )
