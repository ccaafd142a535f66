"""The public JSON form of engine values, and the one way bodies are encoded.

Stored answers are replayed byte for byte, so every body is encoded here, once.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

import orjson

from slotward.engine.approvals import Approval
from slotward.engine.model import AuditEntry, Hold, LedgerRecord
from slotward.engine.rules.fingerprint import public_key
from slotward.engine.rules.timenorm import format_instant

__all__ = [
    "approval_document",
    "audit_document",
    "encode",
    "encode_hold",
    "execution_document",
    "hold_document",
]


def encode(doc: Any) -> bytes:
    """Compact UTF-8 JSON, keys in declaration order."""
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode()


def encode_hold(doc: dict[str, Any]) -> bytes:
    """:func:`encode` of a hold's answer, the same bytes, some ten times faster.

    orjson writes strings, integers up to 64 bits, booleans and null as
    :func:`encode` does; it writes some floats otherwise (``1e-05`` as
    ``0.00001``), and a hold's answer has none: every create, commit and
    release writes one (tests/unit/test_encode_hold.py holds the two to it).
    """
    return orjson.dumps(doc)


def _instant(value: datetime | None) -> str | None:
    return None if value is None else format_instant(value)


def hold_document(hold: Hold, now: datetime) -> dict[str, Any]:
    """A hold as clients see it at ``now`` (a held hold past expiry reads expired)."""
    return {
        "id": hold.id,
        "key": public_key(hold.key),
        "workflow_id": hold.workflow_id,
        "agent_id": hold.agent_id,
        "attendees": list(hold.attendees),
        "start": format_instant(hold.start),
        "end": format_instant(hold.end),
        "title": hold.title,
        "description": hold.description,
        "priority": hold.priority,
        "status": hold.status_at(now).value,
        "expires_at": format_instant(hold.expires_at),
        "token": hold.token,
        "created_at": format_instant(hold.created_at),
        "updated_at": format_instant(hold.updated_at),
        "committed_at": _instant(hold.committed_at),
        "preempted_by": hold.preempted_by,
        "audit_seq": hold.audit_seq,
    }


def approval_document(approval: Approval, now: datetime) -> dict[str, Any]:
    """An approval as clients see it at ``now`` (a pending one past expiry reads expired)."""
    return {
        "id": approval.id,
        "key": public_key(approval.key),
        "workflow_id": approval.workflow_id,
        "requested_by": approval.requested_by,
        "summary": approval.summary,
        "evidence": approval.evidence,
        "action": approval.action,
        "hold_id": approval.hold_id,
        "status": approval.status_at(now).value,
        "created_at": format_instant(approval.created_at),
        "updated_at": format_instant(approval.updated_at),
        "expires_at": format_instant(approval.expires_at),
        "decided_by": approval.decided_by,
        "decided_at": _instant(approval.decided_at),
        "note": approval.note,
        "audit_seq": approval.audit_seq,
    }


def audit_document(entry: AuditEntry) -> dict[str, Any]:
    return {
        "seq": entry.seq,
        "at": format_instant(entry.at),
        "actor": entry.actor,
        "action": entry.action,
        "key": entry.key,
        "hold_id": entry.hold_id,
        "outcome": entry.outcome,
        "prev_hash": entry.prev_hash,
        "hash": entry.hash,
    }


def execution_document(record: LedgerRecord) -> dict[str, Any]:
    """A ledger record as ``GET /v1/executions/{key}`` shows it; never its lease token.

    A completed record carries its ``result``: an execution's reported result,
    or for a hold tool's record the stored answer's body. An executing one has
    none yet.
    """
    doc: dict[str, Any] = {
        "key": public_key(record.key),
        "state": record.state,
        "kind": record.kind,
        "workflow_id": record.workflow_id,
        "tool": record.tool,
        "agent_id": record.agent_id,
        "created_at": format_instant(record.created_at),
        "expires_at": format_instant(record.expires_at),
        "lease_expires_at": _instant(record.lease_expires_at),
        "completed_at": _instant(record.completed_at),
    }
    if record.state != "executing":
        stored = json.loads(record.body)
        doc["result"] = stored["result"] if record.kind == "execution" else stored
    return doc
