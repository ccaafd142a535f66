"""What both stores of the reference server share: the call, its key, the answers, the audit hash.

The reference server (benchmarks/reference.py) is the yardstick for slotward's
create rate, so these are kept to what the store transaction of a hold create
needs: parsing the body into a :class:`Claim` (rejecting only what cannot be
parsed, or what would make the overlap check wrong), the idempotency key, the
hold document that is answered and stored, the hash-chained audit entry and
the tables. Instants are integer microseconds since the epoch, as in slotward.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

__all__ = [
    "BAD_REQUEST",
    "CONFLICT",
    "GENESIS",
    "HOLD_TTL_US",
    "MAX_HOLD_US",
    "RETENTION_US",
    "TENANT",
    "UNAVAILABLE",
    "AuditEntry",
    "BadRequest",
    "Claim",
    "Unavailable",
    "audit_hash",
    "canonical",
    "hold_document",
    "instant",
    "next_audit",
    "parse_claim",
    "schema",
]

# Every call's tenant, unless an X-Tenant header names another; without auth there
# are no agents, so the tenant is also the audit entries' actor.
TENANT = "bench"
MAX_HOLD_US = 24 * 3600 * 10**6  # slotward's longest hold: the overlap scan looks back this far
HOLD_TTL_US = 300 * 10**6  # slotward's default hold TTL
RETENTION_US = 72 * 3600 * 10**6  # slotward's default idempotency retention
GENESIS = "0" * 64  # the hash before a tenant's first audit entry

CONFLICT = b'{"error":"slot_conflict"}'
BAD_REQUEST = b'{"error":"bad_request"}'
UNAVAILABLE = b'{"error":"unavailable"}'

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICRO = timedelta(microseconds=1)


class BadRequest(ValueError):
    """The body cannot be read as a create call."""


class Unavailable(Exception):
    """The store could not run the transaction now (locked, unreachable); a retry may work."""


@dataclass(frozen=True)
class Claim:
    """A parsed create call: attendees trimmed, lower-cased, sorted and deduplicated."""

    tenant: str
    workflow_id: str
    attendees: tuple[str, ...]
    start_us: int
    end_us: int
    key: str


def canonical(doc: Any) -> str:
    """The one JSON text of ``doc`` that keys and hashes are computed over."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":"))


def parse_claim(raw: bytes, tenant: str) -> Claim:
    """The create call in ``raw``; :class:`BadRequest` if it cannot be read as one."""
    try:
        body = json.loads(raw)
        workflow, emails = body["workflow_id"], body["attendees"]
        start, minutes = datetime.fromisoformat(body["start"]), body["duration_minutes"]
    except (ValueError, KeyError, TypeError) as exc:
        raise BadRequest(str(exc)) from exc
    if b"\\u0000" in raw:  # PostgreSQL text cannot hold NUL
        raise BadRequest("NUL in a string")
    if not isinstance(workflow, str) or not workflow:
        raise BadRequest("workflow_id must be a non-empty string")
    if not isinstance(emails, list) or not emails:
        raise BadRequest("attendees must be a non-empty list")
    if not all(isinstance(e, str) and e.strip() for e in emails):
        raise BadRequest("attendees must be non-empty strings")
    if start.tzinfo is None:
        raise BadRequest("start needs an offset or Z")
    # A hold longer than the look-back would escape the overlap check.
    if type(minutes) is not int or not 0 < minutes * 60 * 10**6 <= MAX_HOLD_US:
        raise BadRequest("duration_minutes must be an integer from 1 to 1440")
    try:
        start = start.astimezone(UTC)
        end = start + timedelta(minutes=minutes)
    except OverflowError as exc:  # past year 9999: no instant to answer with
        raise BadRequest("start is out of range") from exc
    attendees = tuple(sorted({e.strip().lower() for e in emails}))
    start_us, end_us = (start - _EPOCH) // _MICRO, (end - _EPOCH) // _MICRO
    intent = {"tenant": tenant, "workflow_id": workflow, "attendees": attendees,
              "start_us": start_us, "end_us": end_us}  # fmt: skip
    key = hashlib.sha256(canonical(intent).encode()).hexdigest()
    return Claim(tenant, workflow, attendees, start_us, end_us, key)


def instant(us: int) -> str:
    """``us`` as ISO 8601 UTC with ``Z``, as slotward writes instants."""
    moment = _EPOCH + us * _MICRO
    fraction = f".{moment.microsecond:06d}" if moment.microsecond else ""
    return f"{moment:%Y-%m-%dT%H:%M:%S}{fraction}Z"


def hold_document(claim: Claim, hold_id: str, expires_us: int) -> bytes:
    """The 201 body of a new hold, stored as its idempotency record's answer."""
    doc = {
        "id": hold_id,
        "workflow_id": claim.workflow_id,
        "status": "held",
        "attendees": list(claim.attendees),
        "start": instant(claim.start_us),
        "end": instant(claim.end_us),
        "expires_at": instant(expires_us),
        "token": 1,
    }
    return json.dumps(doc, separators=(",", ":")).encode()


@dataclass(frozen=True)
class AuditEntry:
    tenant: str
    seq: int
    at_us: int
    actor: str
    action: str
    key: str
    hold_id: str
    outcome: str
    prev_hash: str
    hash: str


def audit_hash(prev_hash: str, fields: dict[str, Any]) -> str:
    """sha256(prev_hash + canonical JSON of the entry's fields): one link of the chain."""
    return hashlib.sha256((prev_hash + canonical(fields)).encode()).hexdigest()


def next_audit(head: tuple[int, str], claim: Claim, hold_id: str, at_us: int) -> AuditEntry:
    """The ``hold.create`` entry that follows ``head`` (seq, hash) in the tenant's chain."""
    entry = AuditEntry(claim.tenant, head[0] + 1, at_us, claim.tenant, "hold.create", claim.key,
                       hold_id, "fresh", head[1], "")  # fmt: skip
    fields = asdict(entry)
    del fields["prev_hash"], fields["hash"]
    return replace(entry, hash=audit_hash(entry.prev_hash, fields))


def schema(blob: str) -> tuple[str, ...]:
    """``CREATE ... IF NOT EXISTS`` for the ``ref_`` tables; ``blob`` is the bytes type.

    The indexes are slotward's where the transaction reads (the overlap scan,
    the primary keys) and the outbox relay's; slotward's others serve features
    the reference does not have (workflow lookups, the expiry sweep, purges).
    """
    big = "BIGINT NOT NULL"
    return (
        f"""CREATE TABLE IF NOT EXISTS ref_holds (
            id TEXT PRIMARY KEY, tenant TEXT NOT NULL, workflow_id TEXT NOT NULL,
            key TEXT NOT NULL, attendees TEXT NOT NULL, start_us {big}, end_us {big},
            status TEXT NOT NULL, expires_us {big}, token INTEGER NOT NULL, created_us {big})""",
        f"""CREATE TABLE IF NOT EXISTS ref_hold_attendees (
            hold_id TEXT NOT NULL, attendee TEXT NOT NULL, tenant TEXT NOT NULL,
            start_us {big}, end_us {big}, active BOOLEAN NOT NULL,
            PRIMARY KEY (hold_id, attendee))""",
        """CREATE INDEX IF NOT EXISTS ix_ref_hold_attendees_overlap
            ON ref_hold_attendees (tenant, attendee, start_us)""",
        f"""CREATE TABLE IF NOT EXISTS ref_idempotency (
            tenant TEXT NOT NULL, key TEXT NOT NULL, status_code INTEGER NOT NULL,
            body {blob} NOT NULL, hold_id TEXT, created_us {big}, expires_us {big},
            PRIMARY KEY (tenant, key))""",
        f"""CREATE TABLE IF NOT EXISTS ref_audit (
            tenant TEXT NOT NULL, seq {big}, at_us {big}, actor TEXT NOT NULL,
            action TEXT NOT NULL, key TEXT, hold_id TEXT, outcome TEXT NOT NULL,
            prev_hash TEXT NOT NULL, hash TEXT NOT NULL, PRIMARY KEY (tenant, seq))""",
        f"""CREATE TABLE IF NOT EXISTS ref_outbox (
            id TEXT PRIMARY KEY, tenant TEXT NOT NULL, type TEXT NOT NULL, hold_id TEXT,
            payload TEXT NOT NULL, state TEXT NOT NULL, attempts INTEGER NOT NULL,
            created_us {big}, next_attempt_us {big})""",
        """CREATE INDEX IF NOT EXISTS ix_ref_outbox_state_next
            ON ref_outbox (state, next_attempt_us)""",
    )
