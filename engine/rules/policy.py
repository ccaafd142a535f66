"""Rules a deployment may tune; the defaults are DESIGN's."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from slotward.engine.rules.audit import AuditKey
from slotward.engine.rules.fingerprint import DEFAULT_THOUGHT_FIELDS

__all__ = ["Policy"]


@dataclass(frozen=True)
class Policy:
    allow_unknown_attendees: bool = True
    max_hold: timedelta = timedelta(hours=24)
    retention: timedelta = timedelta(hours=72)
    default_ttl_seconds: int = 300
    alternatives: int = 3
    thought_fields: frozenset[str] = DEFAULT_THOUGHT_FIELDS
    max_window: timedelta = timedelta(days=14)
    default_lease_seconds: int = 30
    # A workflow whose replays reach storm_replays within storm_window is flagged.
    storm_replays: int = 20
    storm_window: timedelta = timedelta(seconds=60)
    # Set: the audit chain is an HMAC chain under it, and checkpoints are signed
    # (engine/rules/audit.py, engine/rules/checkpoints.py). A secret: never printed.
    audit_key: AuditKey | None = field(default=None, repr=False)
