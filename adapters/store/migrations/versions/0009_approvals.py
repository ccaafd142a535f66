"""Approvals, the tenants' approval policies, dashboard sessions; the dashboard's indexes.

Issue 18 lets an agent ask a person (``approvals``, at most one per hold
commit), lets a tenant require it for some commits (``approval_policies``,
one row per tenant) and signs people in to the dashboard (``sessions``, by
the hash of their cookie's token). The dashboard's timeline reads a tenant's
holds by start (``ix_holds_tenant_start_id``) and the directory's entries
read an attendee's emails (``ix_attendee_emails_tenant_attendee``). Three new
tables and two indexes; nothing existing changes, so the downgrade drops
them (approvals, policies and sessions are lost with them).

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

_S = sa.String
_BIG = sa.BigInteger


def upgrade() -> None:
    op.create_table(
        "approvals",
        sa.Column("id", _S(64), primary_key=True),
        sa.Column("tenant", _S(128), nullable=False),
        sa.Column("key", _S(300), nullable=False),
        sa.Column("workflow_id", _S(255), nullable=True),
        sa.Column("requested_by", _S(128), nullable=False),
        sa.Column("summary", sa.Text, nullable=False),
        sa.Column("evidence", sa.Text, nullable=False),
        sa.Column("action", sa.Text, nullable=True),
        sa.Column("hold_id", _S(64), nullable=True),
        sa.Column("status", _S(16), nullable=False),
        sa.Column("created_us", _BIG, nullable=False),
        sa.Column("updated_us", _BIG, nullable=False),
        sa.Column("expires_us", _BIG, nullable=False),
        sa.Column("audit_seq", _BIG, nullable=False),
        sa.Column("hold_expires_us", _BIG, nullable=True),
        sa.Column("decided_by", _S(128), nullable=True),
        sa.Column("decided_us", _BIG, nullable=True),
        sa.Column("note", sa.Text, nullable=True),
    )
    op.create_index("ux_approvals_tenant_hold", "approvals", ["tenant", "hold_id"], unique=True)
    op.create_index("ix_approvals_tenant_id", "approvals", ["tenant", "id"])
    op.create_index("ix_approvals_status_expires", "approvals", ["status", "expires_us"])
    op.create_table(
        "approval_policies",
        sa.Column("tenant", _S(128), primary_key=True),
        sa.Column("rules", sa.Text, nullable=False),
        sa.Column("updated_us", _BIG, nullable=False),
        sa.Column("updated_by", _S(128), nullable=False),
    )
    op.create_table(
        "sessions",
        sa.Column("token_hash", _S(64), primary_key=True),
        sa.Column("key_id", _S(64), nullable=False),
        sa.Column("tenant", _S(128), nullable=False),
        sa.Column("created_us", _BIG, nullable=False),
        sa.Column("expires_us", _BIG, nullable=False),
    )
    op.create_index("ix_sessions_expires", "sessions", ["expires_us"])
    op.create_index("ix_holds_tenant_start_id", "holds", ["tenant", "start_us", "id"])
    op.create_index(
        "ix_attendee_emails_tenant_attendee", "attendee_emails", ["tenant", "attendee_id"]
    )


def downgrade() -> None:
    op.drop_index("ix_attendee_emails_tenant_attendee", table_name="attendee_emails")
    op.drop_index("ix_holds_tenant_start_id", table_name="holds")
    for table in ("sessions", "approval_policies", "approvals"):
        op.drop_table(table)  # their indexes go with them
