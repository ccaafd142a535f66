"""The generic ledger (/v1/executions), retention purge, and the retry-storm watch.

Ledger rows gain what an execution needs: its kind, workflow, tool, agent, the
current lease (token and expiry) and the completion time. ``workflow_stats``
keeps each workflow's replay count and its last retry-storm flag;
``workflow_replays`` its recent replays per second they happened in, over every
process, which is what a storm is measured on.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

_S = sa.String
_BIG = sa.BigInteger


def upgrade() -> None:
    with op.batch_alter_table("ledger") as batch:
        batch.add_column(sa.Column("kind", _S(16), nullable=False, server_default="hold"))
        batch.add_column(sa.Column("workflow_id", _S(255), nullable=True))
        batch.add_column(sa.Column("tool", _S(128), nullable=True))
        batch.add_column(sa.Column("agent_id", _S(128), nullable=True))
        batch.add_column(sa.Column("lease_token", _S(64), nullable=True))
        batch.add_column(sa.Column("lease_expires_us", _BIG, nullable=True))
        batch.add_column(sa.Column("completed_us", _BIG, nullable=True))
    op.create_index("ix_ledger_expires", "ledger", ["expires_us"])
    op.create_index("ix_ledger_tenant_workflow", "ledger", ["tenant", "workflow_id"])
    op.create_index("ix_ledger_lease", "ledger", ["lease_expires_us"])
    op.create_table(
        "workflow_stats",
        sa.Column("tenant", _S(128), primary_key=True),
        sa.Column("workflow_id", _S(255), primary_key=True),
        sa.Column("replays", _BIG, nullable=False),
        sa.Column("last_replay_us", _BIG, nullable=True),
        sa.Column("storm_us", _BIG, nullable=True),
        sa.Column("storms", sa.Integer, nullable=False),
    )
    op.create_table(
        "workflow_replays",
        sa.Column("tenant", _S(128), primary_key=True),
        sa.Column("workflow_id", _S(255), primary_key=True),
        sa.Column("second_us", _BIG, primary_key=True, autoincrement=False),
        sa.Column("count", _BIG, nullable=False),
    )
    op.create_index(
        "ix_workflow_replays_tenant_second", "workflow_replays", ["tenant", "second_us"]
    )


def downgrade() -> None:
    op.drop_index("ix_workflow_replays_tenant_second", "workflow_replays")
    op.drop_table("workflow_replays")
    op.drop_table("workflow_stats")
    op.drop_index("ix_ledger_lease", "ledger")
    op.drop_index("ix_ledger_tenant_workflow", "ledger")
    op.drop_index("ix_ledger_expires", "ledger")
    with op.batch_alter_table("ledger") as batch:
        for name in (
            "completed_us", "lease_expires_us", "lease_token", "agent_id", "tool",
            "workflow_id", "kind",
        ):  # fmt: skip
            batch.drop_column(name)
