"""The approvals' tables (migration 0009, issue 18), re-exported by tables.py.

Evidence and action are JSON text, kept as written (jsonb would reorder an
object's keys); a hold has at most one approval. Instants are integer
microseconds since the epoch (UTC), as in every table.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Column, Index, String, Table, Text

from slotward.adapters.store.metadata import metadata

__all__ = ["approval_policies", "approvals", "sessions"]

approvals = Table(
    "approvals",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("tenant", String(128), nullable=False),
    Column("key", String(300), nullable=False),
    Column("workflow_id", String(255), nullable=True),
    Column("requested_by", String(128), nullable=False),
    Column("summary", Text, nullable=False),
    Column("evidence", Text, nullable=False),  # compact JSON, any value
    Column("action", Text, nullable=True),  # compact JSON object
    Column("hold_id", String(64), nullable=True),
    Column("status", String(16), nullable=False),  # pending, approved, denied, expired
    Column("created_us", BigInteger, nullable=False),
    Column("updated_us", BigInteger, nullable=False),
    Column("expires_us", BigInteger, nullable=False),
    Column("audit_seq", BigInteger, nullable=False),
    Column("hold_expires_us", BigInteger, nullable=True),
    Column("decided_by", String(128), nullable=True),
    Column("decided_us", BigInteger, nullable=True),
    Column("note", Text, nullable=True),
    # One approval per hold commit (NULLs are distinct: any number of others).
    Index("ux_approvals_tenant_hold", "tenant", "hold_id", unique=True),
    Index("ix_approvals_tenant_id", "tenant", "id"),
    Index("ix_approvals_status_expires", "status", "expires_us"),  # the sweeper
)

approval_policies = Table(
    "approval_policies",
    metadata,
    Column("tenant", String(128), primary_key=True),
    Column("rules", Text, nullable=False),  # JSON object of ApprovalRules' fields
    Column("updated_us", BigInteger, nullable=False),
    Column("updated_by", String(128), nullable=False),
)

# Dashboard sign-ins, by the SHA-256 of their cookie's token.
sessions = Table(
    "sessions",
    metadata,
    Column("token_hash", String(64), primary_key=True),
    Column("key_id", String(64), nullable=False),
    Column("tenant", String(128), nullable=False),
    Column("created_us", BigInteger, nullable=False),
    Column("expires_us", BigInteger, nullable=False),
    Index("ix_sessions_expires", "expires_us"),
)
