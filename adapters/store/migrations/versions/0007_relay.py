"""The outbox is delivered: per-hold event order, webhook subscriptions, deliveries, leases.

Issue 14's relay fans every outbox event out into one delivery per matching
webhook subscription and sends each hold's events in order. So:

- ``holds.event_seq``: how many events the hold has emitted. An existing hold
  gets the count of its outbox events (every transition wrote exactly one).
- ``outbox.seq``: the event's place among its hold's, filled for existing rows
  in their per-hold order of ``(created_us, id)`` (ids are time-ordered, so
  two events of one transaction keep the order they were written in); NULL
  for an event of no hold. ``fanned`` (existing rows: false, so the relay
  fans them out; with no subscription yet they are delivered at once) and
  ``settled_us``. The state of existing rows stays ``pending``: nothing was
  ever delivered before.
- ``outbox.attempts`` and ``next_attempt_us`` go: retries are per delivery
  now, so ``ix_outbox_state_next`` goes with them.
- New tables ``webhooks``, ``deliveries``, ``delivery_attempts``, ``leases``.

The downgrade drops the new tables and columns and gives every event back
``attempts = 0`` and ``next_attempt_us = created_us``; what was delivered is
lost with the deliveries (the code before 0007 delivered nothing).

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

_S = sa.String
_BIG = sa.BigInteger

_outbox = sa.table(
    "outbox",
    sa.column("id"),
    sa.column("hold_id"),
    sa.column("created_us"),
    sa.column("seq", sa.Integer),
    sa.column("attempts", sa.Integer),
    sa.column("next_attempt_us", _BIG),
)
_holds = sa.table("holds", sa.column("id"), sa.column("event_seq", sa.Integer))


def upgrade() -> None:
    op.drop_index("ix_outbox_state_next", table_name="outbox")
    with op.batch_alter_table("outbox") as batch:
        batch.drop_column("attempts")
        batch.drop_column("next_attempt_us")
        batch.add_column(sa.Column("seq", sa.Integer, nullable=True))
        batch.add_column(sa.Column("fanned", sa.Boolean, nullable=False, server_default="0"))
        batch.add_column(sa.Column("settled_us", _BIG, nullable=True))
    op.create_index("ix_outbox_fanned_created", "outbox", ["fanned", "created_us"])
    op.create_index("ix_outbox_hold_seq", "outbox", ["hold_id", "seq"])
    op.create_index("ix_outbox_state_created", "outbox", ["state", "created_us"])
    op.create_index("ix_outbox_tenant_id", "outbox", ["tenant", "id"])
    _number_events()
    with op.batch_alter_table("holds") as batch:
        batch.add_column(sa.Column("event_seq", sa.Integer, nullable=False, server_default="0"))
    _count_events()
    _create_tables()


def _number_events() -> None:
    """Each hold's events 1, 2, ... in the order they were written."""
    earlier = _outbox.alias("earlier")
    place = (
        sa.select(sa.func.count())
        .select_from(earlier)
        .where(
            earlier.c.hold_id == _outbox.c.hold_id,
            sa.or_(
                earlier.c.created_us < _outbox.c.created_us,
                sa.and_(earlier.c.created_us == _outbox.c.created_us, earlier.c.id <= _outbox.c.id),
            ),
        )
        .scalar_subquery()
    )
    op.execute(_outbox.update().where(_outbox.c.hold_id.is_not(None)).values(seq=place))


def _count_events() -> None:
    count = (
        sa.select(sa.func.count())
        .select_from(_outbox)
        .where(_outbox.c.hold_id == _holds.c.id)
        .scalar_subquery()
    )
    op.execute(_holds.update().values(event_seq=count))


def _create_tables() -> None:
    op.create_table(
        "webhooks",
        sa.Column("id", _S(64), primary_key=True),
        sa.Column("tenant", _S(128), nullable=False),
        sa.Column("url", sa.Text, nullable=False),
        sa.Column("topics", sa.Text, nullable=False),
        sa.Column("description", sa.Text, nullable=True),
        sa.Column("status", _S(16), nullable=False),
        sa.Column("disabled_reason", sa.Text, nullable=True),
        sa.Column("secrets", sa.Text, nullable=False),
        sa.Column("created_us", _BIG, nullable=False),
        sa.Column("updated_us", _BIG, nullable=False),
        sa.Column("last_attempt_us", _BIG, nullable=True),
        sa.Column("last_status", sa.Integer, nullable=True),
        sa.Column("last_delivery_us", _BIG, nullable=True),
        sa.Column("consecutive_failures", sa.Integer, nullable=False),
        sa.Column("failing_since_us", _BIG, nullable=True),
    )
    op.create_index("ix_webhooks_tenant_id", "webhooks", ["tenant", "id"])
    op.create_index("ix_webhooks_status_tenant", "webhooks", ["status", "tenant"])
    op.create_table(
        "deliveries",
        sa.Column("id", _S(64), primary_key=True),
        sa.Column("event_id", _S(64), nullable=False),
        sa.Column("subscription_id", _S(64), nullable=False),
        sa.Column("tenant", _S(128), nullable=False),
        sa.Column("hold_id", _S(64), nullable=True),
        sa.Column("seq", sa.Integer, nullable=True),
        sa.Column("state", _S(16), nullable=False),
        sa.Column("attempts", sa.Integer, nullable=False),
        sa.Column("next_attempt_us", _BIG, nullable=False),
        sa.Column("created_us", _BIG, nullable=False),
        sa.Column("claim_owner", _S(64), nullable=True),
        sa.Column("claim_until_us", _BIG, nullable=True),
        sa.Column("delivered_us", _BIG, nullable=True),
        sa.Column("last_status", sa.Integer, nullable=True),
        sa.Column("last_error", sa.Text, nullable=True),
    )
    op.create_index(
        "ux_deliveries_event_subscription",
        "deliveries",
        ["event_id", "subscription_id"],
        unique=True,
    )
    op.create_index("ix_deliveries_state_next", "deliveries", ["state", "next_attempt_us"])
    op.create_index(
        "ix_deliveries_subscription_hold_seq", "deliveries", ["subscription_id", "hold_id", "seq"]
    )
    op.create_table(
        "delivery_attempts",
        sa.Column("delivery_id", _S(64), primary_key=True),
        sa.Column("n", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("at_us", _BIG, nullable=False),
        sa.Column("status", sa.Integer, nullable=True),
        sa.Column("error", sa.Text, nullable=True),
    )
    op.create_table(
        "leases",
        sa.Column("name", _S(64), primary_key=True),
        sa.Column("owner", _S(64), nullable=False),
        sa.Column("until_us", _BIG, nullable=False),
    )


def downgrade() -> None:
    for table in ("leases", "delivery_attempts", "deliveries", "webhooks"):
        op.drop_table(table)  # their indexes go with them
    with op.batch_alter_table("holds") as batch:
        batch.drop_column("event_seq")
    for index in (
        "ix_outbox_tenant_id", "ix_outbox_state_created", "ix_outbox_hold_seq",
        "ix_outbox_fanned_created",
    ):  # fmt: skip
        op.drop_index(index, table_name="outbox")
    with op.batch_alter_table("outbox") as batch:
        batch.add_column(sa.Column("attempts", sa.Integer, nullable=True))
        batch.add_column(sa.Column("next_attempt_us", _BIG, nullable=True))
    op.execute(_outbox.update().values(attempts=0, next_attempt_us=_outbox.c.created_us))
    with op.batch_alter_table("outbox") as batch:
        batch.alter_column("attempts", existing_type=sa.Integer, nullable=False)
        batch.alter_column("next_attempt_us", existing_type=_BIG, nullable=False)
        batch.drop_column("seq")
        batch.drop_column("fanned")
        batch.drop_column("settled_us")
    op.create_index("ix_outbox_state_next", "outbox", ["state", "next_attempt_us"])
