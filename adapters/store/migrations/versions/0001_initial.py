"""The walking skeleton's schema: keys, directory, holds, ledger, audit, outbox.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

_S = sa.String
_BIG = sa.BigInteger


def upgrade() -> None:
    op.create_table(
        "api_keys",
        sa.Column("id", _S(64), primary_key=True),
        sa.Column("key_hash", _S(64), nullable=False, unique=True),
        sa.Column("tenant", _S(128), nullable=False),
        sa.Column("agent_id", _S(128), nullable=False),
        sa.Column("role", _S(16), nullable=False),
        sa.Column("priority", sa.Integer, nullable=False),
        sa.Column("created_us", _BIG, nullable=False),
        sa.Column("revoked_us", _BIG, nullable=True),
    )
    op.create_table(
        "attendees",
        sa.Column("tenant", _S(128), primary_key=True),
        sa.Column("id", _S(128), primary_key=True),
        sa.Column("name", sa.Text, nullable=True),
        sa.Column("created_us", _BIG, nullable=False),
    )
    op.create_table(
        "attendee_emails",
        sa.Column("tenant", _S(128), primary_key=True),
        sa.Column("email", _S(254), primary_key=True),
        sa.Column("attendee_id", _S(128), nullable=False),
    )
    _create_holds()
    op.create_table(
        "ledger",
        sa.Column("tenant", _S(128), primary_key=True),
        sa.Column("key", _S(300), primary_key=True),
        sa.Column("fingerprint", _S(255), nullable=False),
        sa.Column("state", _S(16), nullable=False),
        sa.Column("status_code", sa.Integer, nullable=False),
        sa.Column("body", sa.LargeBinary, nullable=False),
        sa.Column("hold_id", _S(64), nullable=True),
        sa.Column("created_us", _BIG, nullable=False),
        sa.Column("expires_us", _BIG, nullable=False),
    )
    op.create_index("ix_ledger_tenant_fingerprint", "ledger", ["tenant", "fingerprint"])
    _create_audit_and_outbox()


def _create_holds() -> None:
    op.create_table(
        "holds",
        sa.Column("id", _S(64), primary_key=True),
        sa.Column("tenant", _S(128), nullable=False),
        sa.Column("key", _S(300), nullable=False),
        sa.Column("workflow_id", _S(255), nullable=False),
        sa.Column("agent_id", _S(128), nullable=False),
        sa.Column("attendees", sa.Text, nullable=False),
        sa.Column("start_us", _BIG, nullable=False),
        sa.Column("end_us", _BIG, nullable=False),
        sa.Column("title", sa.Text, nullable=False),
        sa.Column("description", sa.Text, nullable=True),
        sa.Column("priority", sa.Integer, nullable=False),
        sa.Column("status", _S(16), nullable=False),
        sa.Column("expires_us", _BIG, nullable=False),
        sa.Column("token", sa.Integer, nullable=False),
        sa.Column("intent_fp", _S(64), nullable=False),
        sa.Column("created_us", _BIG, nullable=False),
        sa.Column("updated_us", _BIG, nullable=False),
        sa.Column("committed_us", _BIG, nullable=True),
        sa.Column("preempted_by", _S(64), nullable=True),
        sa.Column("audit_seq", _BIG, nullable=False),
    )
    op.create_index(
        "ix_holds_tenant_workflow_intent", "holds", ["tenant", "workflow_id", "intent_fp"]
    )
    op.create_index("ix_holds_status_expires", "holds", ["status", "expires_us"])
    op.create_index("ix_holds_tenant_id", "holds", ["tenant", "id"])
    op.create_table(
        "hold_attendees",
        sa.Column("hold_id", _S(64), primary_key=True),
        sa.Column("attendee", _S(128), primary_key=True),
        sa.Column("tenant", _S(128), nullable=False),
        sa.Column("start_us", _BIG, nullable=False),
        sa.Column("end_us", _BIG, nullable=False),
        sa.Column("active", sa.Boolean, nullable=False),
    )
    op.create_index(
        "ix_hold_attendees_overlap", "hold_attendees", ["tenant", "attendee", "start_us"]
    )


def _create_audit_and_outbox() -> None:
    op.create_table(
        "audit_log",
        sa.Column("tenant", _S(128), primary_key=True),
        sa.Column("seq", _BIG, primary_key=True, autoincrement=False),
        sa.Column("at_us", _BIG, nullable=False),
        sa.Column("actor", _S(128), nullable=False),
        sa.Column("action", _S(64), nullable=False),
        sa.Column("key", _S(300), nullable=True),
        sa.Column("hold_id", _S(64), nullable=True),
        sa.Column("outcome", _S(32), nullable=False),
        sa.Column("prev_hash", _S(64), nullable=False),
        sa.Column("hash", _S(64), nullable=False),
    )
    op.create_table(
        "audit_heads",
        sa.Column("tenant", _S(128), primary_key=True),
        sa.Column("seq", _BIG, nullable=False),
        sa.Column("hash", _S(64), nullable=False),
    )
    op.create_table(
        "outbox",
        sa.Column("id", _S(64), primary_key=True),
        sa.Column("tenant", _S(128), nullable=False),
        sa.Column("type", _S(64), nullable=False),
        sa.Column("hold_id", _S(64), nullable=True),
        sa.Column("payload", sa.Text, nullable=False),
        sa.Column("state", _S(16), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("created_us", _BIG, nullable=False),
        sa.Column("next_attempt_us", _BIG, nullable=False),
    )
    op.create_index("ix_outbox_state_next", "outbox", ["state", "next_attempt_us"])


def downgrade() -> None:
    for table in (
        "outbox", "audit_heads", "audit_log", "hold_attendees", "holds", "ledger",
        "attendee_emails", "attendees", "api_keys",
    ):  # fmt: skip
        op.drop_table(table)
