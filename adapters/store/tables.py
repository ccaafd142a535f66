"""The schema, as SQLAlchemy Core tables (the migrations create the same).

Instants are stored as integer microseconds since the epoch (UTC): portable,
cheap to compare, and usable in a PostgreSQL ``int8range`` exclusion
constraint later. ``hold_attendees`` holds one row per (hold, attendee) with an
``active`` flag (held or committed), which is what the overlap index serves.
The approvals' and the calendar providers' tables are declared in
approval_tables.py and calendar_tables.py, on the same ``metadata``
(metadata.py), and re-exported here: every table is ``tables.X``.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    Index,
    Integer,
    LargeBinary,
    String,
    Table,
    Text,
    text,
)

from slotward.adapters.store.approval_tables import approval_policies, approvals, sessions
from slotward.adapters.store.calendar_tables import (
    CALENDAR_WRITE_DELETE,
    calendar_bindings,
    calendar_busy,
    calendar_writes,
)
from slotward.adapters.store.metadata import metadata

__all__ = [
    "CALENDAR_WRITE_DELETE",
    "LEDGER_EXECUTION",
    "LEDGER_LEASED",
    "LEDGER_UNDER_CLIENT_KEY",
    "api_keys",
    "approval_policies",
    "approvals",
    "attendee_emails",
    "attendees",
    "audit_heads",
    "audit_log",
    "calendar_bindings",
    "calendar_busy",
    "calendar_writes",
    "deliveries",
    "delivery_attempts",
    "hold_attendees",
    "holds",
    "leases",
    "ledger",
    "legacy_attendee_emails",
    "metadata",
    "outbox",
    "sessions",
    "webhooks",
    "workflow_replays",
    "workflow_stats",
]

api_keys = Table(
    "api_keys",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("key_hash", String(64), nullable=False, unique=True),
    Column("tenant", String(128), nullable=False),
    Column("agent_id", String(128), nullable=False),
    Column("role", String(16), nullable=False),
    Column("priority", Integer, nullable=False),
    Column("created_us", BigInteger, nullable=False),
    Column("revoked_us", BigInteger, nullable=True),
)

attendees = Table(
    "attendees",
    metadata,
    Column("tenant", String(128), primary_key=True),
    Column("id", String(128), primary_key=True),
    Column("name", Text, nullable=True),
    Column("created_us", BigInteger, nullable=False),
)

attendee_emails = Table(
    "attendee_emails",
    metadata,
    Column("tenant", String(128), primary_key=True),
    Column("email", String(254), primary_key=True),
    Column("attendee_id", String(128), nullable=False),
    # An attendee's emails, for the directory's entries (migration 0009).
    Index("ix_attendee_emails_tenant_attendee", "tenant", "attendee_id"),
)

# The aliases migration 0005 rewrote, merged into another attendee, or left
# alone because the normalization refuses them: their old spelling, kept for
# operators (and the downgrade). Nothing reads it at run time.
legacy_attendee_emails = Table(
    "legacy_attendee_emails",
    metadata,
    Column("tenant", String(128), primary_key=True),
    Column("email", String(254), primary_key=True),
    Column("attendee_id", String(128), nullable=False),
    Column("normalized", String(254), nullable=True),
    Column("outcome", String(16), nullable=False),
)

holds = Table(
    "holds",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("tenant", String(128), nullable=False),
    Column("key", String(300), nullable=False),
    Column("workflow_id", String(255), nullable=False),
    Column("agent_id", String(128), nullable=False),
    Column("attendees", Text, nullable=False),  # JSON list, sorted
    Column("start_us", BigInteger, nullable=False),
    Column("end_us", BigInteger, nullable=False),
    Column("title", Text, nullable=False),
    Column("description", Text, nullable=True),
    Column("priority", Integer, nullable=False),
    Column("status", String(16), nullable=False),
    Column("expires_us", BigInteger, nullable=False),
    Column("token", Integer, nullable=False),
    Column("intent_fp", String(64), nullable=False),
    Column("created_us", BigInteger, nullable=False),
    Column("updated_us", BigInteger, nullable=False),
    Column("committed_us", BigInteger, nullable=True),
    Column("preempted_by", String(64), nullable=True),
    Column("audit_seq", BigInteger, nullable=False),
    # The hold's events so far: the per-hold sequence of its last (migration 0007).
    Column("event_seq", Integer, nullable=False, server_default="0"),
    Index("ix_holds_tenant_workflow_intent_id", "tenant", "workflow_id", "intent_fp", "id"),
    Index("ix_holds_status_expires", "status", "expires_us"),
    Index("ix_holds_tenant_id", "tenant", "id"),
    # The dashboard's window, by start then id (migration 0009): the index's
    # own order, so its limit ends the scan.
    Index("ix_holds_tenant_start_id", "tenant", "start_us", "id"),
)

hold_attendees = Table(
    "hold_attendees",
    metadata,
    Column("hold_id", String(64), primary_key=True),
    Column("attendee", String(128), primary_key=True),
    Column("tenant", String(128), nullable=False),
    Column("start_us", BigInteger, nullable=False),
    Column("end_us", BigInteger, nullable=False),
    Column("active", Boolean, nullable=False),
    # Covers the overlap query (migration 0004).
    Index(
        "ix_hold_attendees_overlap", "tenant", "attendee", "start_us", "end_us", "active", "hold_id"
    ),
)

ledger = Table(
    "ledger",
    metadata,
    Column("tenant", String(128), primary_key=True),
    Column("key", String(300), primary_key=True),
    Column("fingerprint", String(255), nullable=False),
    Column("state", String(16), nullable=False),
    Column("body", LargeBinary, nullable=False),
    Column("hold_id", String(64), nullable=True),
    Column("created_us", BigInteger, nullable=False),
    Column("expires_us", BigInteger, nullable=False),
    Column("kind", String(16), nullable=False, server_default="hold"),
    Column("workflow_id", String(255), nullable=True),
    Column("tool", String(128), nullable=True),
    Column("agent_id", String(128), nullable=True),
    Column("lease_token", String(64), nullable=True),
    Column("lease_expires_us", BigInteger, nullable=True),
    Column("completed_us", BigInteger, nullable=True),
    # The first answer made a resource; last, where migration 0006 added it.
    Column("created", Boolean, nullable=False),
    Index("ix_ledger_expires", "expires_us"),
    Index("ix_ledger_tenant_expires", "tenant", "expires_us"),
)


def _partial(name: str, *columns: str, where: str) -> Index:
    """An index of the ledger's records that meet ``where`` (migration 0010).

    A lookup uses it only when its statement names ``where`` itself: see
    ``ledger_repo`` for the lookups and the conditions they carry.
    """
    condition = text(where)
    return Index(
        name, *(ledger.c[c] for c in columns), sqlite_where=condition, postgresql_where=condition
    )


# The records stored under another key than their fingerprint (a client's).
LEDGER_UNDER_CLIENT_KEY = '"key" <> fingerprint'
LEDGER_EXECUTION = "kind = 'execution'"
LEDGER_LEASED = "lease_expires_us IS NOT NULL"
_partial("ix_ledger_tenant_fingerprint", "tenant", "fingerprint", where=LEDGER_UNDER_CLIENT_KEY)
_partial("ix_ledger_tenant_workflow", "tenant", "workflow_id", where=LEDGER_EXECUTION)
_partial("ix_ledger_lease", "lease_expires_us", where=LEDGER_LEASED)

workflow_stats = Table(
    "workflow_stats",
    metadata,
    Column("tenant", String(128), primary_key=True),
    Column("workflow_id", String(255), primary_key=True),
    Column("replays", BigInteger, nullable=False),
    Column("last_replay_us", BigInteger, nullable=True),
    Column("storm_us", BigInteger, nullable=True),
    Column("storms", Integer, nullable=False),
)

# Replays per workflow and whole second they happened in, summed over every
# process's hand-overs: what a storm spread over processes is measured on.
workflow_replays = Table(
    "workflow_replays",
    metadata,
    Column("tenant", String(128), primary_key=True),
    Column("workflow_id", String(255), primary_key=True),
    Column("second_us", BigInteger, primary_key=True, autoincrement=False),
    Column("count", BigInteger, nullable=False),
    Index("ix_workflow_replays_tenant_second", "tenant", "second_us"),  # the pruning
)

audit_log = Table(
    "audit_log",
    metadata,
    Column("tenant", String(128), primary_key=True),
    Column("seq", BigInteger, primary_key=True, autoincrement=False),
    Column("at_us", BigInteger, nullable=False),
    Column("actor", String(128), nullable=False),
    Column("action", String(64), nullable=False),
    Column("key", String(300), nullable=True),
    Column("hold_id", String(64), nullable=True),
    Column("outcome", String(32), nullable=False),
    Column("prev_hash", String(64), nullable=False),
    Column("hash", String(64), nullable=False),
)

audit_heads = Table(
    "audit_heads",
    metadata,
    Column("tenant", String(128), primary_key=True),
    Column("seq", BigInteger, nullable=False),
    Column("hash", String(64), nullable=False),
)

# Migration 0007 gave the outbox its per-hold sequence and fan-out, and the
# deliveries below took over its attempts and schedule.
outbox = Table(
    "outbox",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("tenant", String(128), nullable=False),
    Column("type", String(64), nullable=False),
    Column("hold_id", String(64), nullable=True),
    Column("payload", Text, nullable=False),
    Column("state", String(16), nullable=False),  # pending, delivered, dead
    Column("created_us", BigInteger, nullable=False),
    Column("seq", Integer, nullable=True),  # the event's place among its hold's
    Column("fanned", Boolean, nullable=False, server_default="0"),
    Column("settled_us", BigInteger, nullable=True),
    Index("ix_outbox_fanned_created", "fanned", "created_us"),
    Index("ix_outbox_hold_seq", "hold_id", "seq"),
    Index("ix_outbox_state_created", "state", "created_us"),
    Index("ix_outbox_tenant_id", "tenant", "id"),
)

webhooks = Table(
    "webhooks",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("tenant", String(128), nullable=False),
    Column("url", Text, nullable=False),
    Column("topics", Text, nullable=False),  # JSON list
    Column("description", Text, nullable=True),
    Column("status", String(16), nullable=False),  # active, disabled
    Column("disabled_reason", Text, nullable=True),
    Column("secrets", Text, nullable=False),  # JSON list of {"sealed", "until_us"}
    Column("created_us", BigInteger, nullable=False),
    Column("updated_us", BigInteger, nullable=False),
    Column("last_attempt_us", BigInteger, nullable=True),
    Column("last_status", Integer, nullable=True),
    Column("last_delivery_us", BigInteger, nullable=True),
    Column("consecutive_failures", Integer, nullable=False),
    Column("failing_since_us", BigInteger, nullable=True),
    Index("ix_webhooks_tenant_id", "tenant", "id"),
    Index("ix_webhooks_status_tenant", "status", "tenant"),
)

deliveries = Table(
    "deliveries",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("event_id", String(64), nullable=False),
    Column("subscription_id", String(64), nullable=False),
    Column("tenant", String(128), nullable=False),
    Column("hold_id", String(64), nullable=True),
    Column("seq", Integer, nullable=True),
    Column("state", String(16), nullable=False),  # pending, delivered, dead
    Column("attempts", Integer, nullable=False),
    Column("next_attempt_us", BigInteger, nullable=False),
    Column("created_us", BigInteger, nullable=False),
    Column("claim_owner", String(64), nullable=True),
    Column("claim_until_us", BigInteger, nullable=True),
    Column("delivered_us", BigInteger, nullable=True),
    Column("last_status", Integer, nullable=True),
    Column("last_error", Text, nullable=True),
    Index("ux_deliveries_event_subscription", "event_id", "subscription_id", unique=True),
    Index("ix_deliveries_state_next", "state", "next_attempt_us"),
    Index("ix_deliveries_subscription_hold_seq", "subscription_id", "hold_id", "seq"),
)

delivery_attempts = Table(
    "delivery_attempts",
    metadata,
    Column("delivery_id", String(64), primary_key=True),
    Column("n", Integer, primary_key=True, autoincrement=False),
    Column("at_us", BigInteger, nullable=False),
    Column("status", Integer, nullable=True),
    Column("error", Text, nullable=True),
)

# Named leases held by one process at a time (the relay on SQLite).
leases = Table(
    "leases",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("owner", String(64), nullable=False),
    Column("until_us", BigInteger, nullable=False),
)
