"""The audit hash chain: one chain per tenant, each entry hashing its predecessor."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime

from slotward.engine.fingerprint import canonical_json
from slotward.engine.model import AuditEntry
from slotward.engine.timenorm import format_instant

__all__ = ["GENESIS", "ChainCheck", "entry_hash", "next_entry", "verify_chain"]

GENESIS = "0" * 64


def entry_hash(entry: AuditEntry) -> str:
    """SHA-256 of the entry's canonical JSON, every field but its own hash."""
    doc = {
        "tenant": entry.tenant,
        "seq": entry.seq,
        "at": format_instant(entry.at),
        "actor": entry.actor,
        "action": entry.action,
        "key": entry.key,
        "hold": entry.hold_id,
        "outcome": entry.outcome,
        "prev_hash": entry.prev_hash,
    }
    return hashlib.sha256(canonical_json(doc)).hexdigest()


def next_entry(
    head: tuple[int, str],
    *,
    tenant: str,
    at: datetime,
    actor: str,
    action: str,
    key: str | None,
    hold_id: str | None,
    outcome: str,
) -> AuditEntry:
    """The entry that follows ``head`` (``(seq, hash)``) in the tenant's chain."""
    draft = AuditEntry(tenant, head[0] + 1, at, actor, action, key, hold_id, outcome, head[1], "")
    return replace(draft, hash=entry_hash(draft))


@dataclass(frozen=True)
class ChainCheck:
    ok: bool
    count: int
    head: str
    broken_at: int | None = None


def verify_chain(
    entries: Iterable[AuditEntry], start: tuple[int, str] = (0, GENESIS)
) -> ChainCheck:
    """Recompute every hash in order; report the first seq that does not fit."""
    seq, prev, count = start[0], start[1], 0
    for entry in entries:
        expected = entry_hash(entry)
        if entry.seq != seq + 1 or entry.prev_hash != prev or entry.hash != expected:
            return ChainCheck(False, count, prev, broken_at=entry.seq)
        seq, prev, count = entry.seq, entry.hash, count + 1
    return ChainCheck(True, count, prev)
