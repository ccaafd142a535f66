"""Immutable values of the coordination core: holds, ledger records, audit, events."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

__all__ = [
    "AuditEntry",
    "Hold",
    "HoldStatus",
    "LedgerRecord",
    "OutboxEvent",
    "Principal",
    "Reply",
    "Role",
]

Role = Literal["agent", "reviewer", "admin"]


class HoldStatus(enum.StrEnum):
    HELD = "held"
    COMMITTED = "committed"
    RELEASED = "released"
    EXPIRED = "expired"
    PREEMPTED = "preempted"


@dataclass(frozen=True)
class Principal:
    """Who is calling: resolved from an API key."""

    tenant: str
    agent_id: str
    role: Role
    priority: int


@dataclass(frozen=True)
class Hold:
    id: str
    key: str
    tenant: str
    workflow_id: str
    agent_id: str
    attendees: tuple[str, ...]
    start: datetime
    end: datetime
    title: str
    description: str | None
    priority: int
    status: HoldStatus
    expires_at: datetime
    token: int
    intent_fp: str
    created_at: datetime
    updated_at: datetime
    audit_seq: int
    committed_at: datetime | None = None
    preempted_by: str | None = None

    def status_at(self, now: datetime) -> HoldStatus:
        """The status a reader sees: a held hold past its expiry is expired, swept or not."""
        if self.status is HoldStatus.HELD and self.expires_at <= now:
            return HoldStatus.EXPIRED
        return self.status

    def blocks_at(self, now: datetime) -> bool:
        return self.status_at(now) in (HoldStatus.HELD, HoldStatus.COMMITTED)


@dataclass(frozen=True)
class LedgerRecord:
    """One idempotency record: the first answer given under ``key``."""

    tenant: str
    key: str
    fingerprint: str
    state: Literal["executing", "succeeded", "failed_terminal"]
    status_code: int
    body: bytes
    created_at: datetime
    expires_at: datetime
    hold_id: str | None = None


@dataclass(frozen=True)
class AuditEntry:
    tenant: str
    seq: int
    at: datetime
    actor: str
    action: str
    key: str | None
    hold_id: str | None
    outcome: str
    prev_hash: str
    hash: str


@dataclass(frozen=True)
class OutboxEvent:
    id: str
    tenant: str
    type: str
    created_at: datetime
    payload: dict[str, Any] = field(default_factory=dict)
    hold_id: str | None = None


@dataclass(frozen=True)
class Reply:
    """What a mutating use case answers: the response and whether it was replayed."""

    status: int
    body: bytes
    key: str
    replayed: bool
    hold_id: str | None = None
