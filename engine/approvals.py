"""Immutable values of approvals: a person in the loop (DESIGN section 6, "Approvals").

An **approval** is an agent's question to a person: a one-line ``summary``, a
JSON ``evidence`` and, optionally, the ``action`` it gates. The action
``{"type": "hold.commit", "hold_id": ...}`` gates that hold's commit (one
approval per hold, ever); any other action is the agent's own business,
which it carries out after reading the outcome back. A pending approval
expires at ``expires_at``: every read shows it ``expired`` from then on,
swept or not, as a held hold past its expiry reads expired.

An **approval policy** is a tenant's rules for which commits need one
(``PUT /v1/approval-policy``); a **session** is a person's sign-in to the
dashboard, a cookie standing for an API key of the reviewer or admin role.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime
from typing import Any

__all__ = [
    "HOLD_COMMIT",
    "Approval",
    "ApprovalRules",
    "ApprovalStatus",
    "DirectoryEntry",
    "Session",
]

# The action type of an approval that gates a hold's commit.
HOLD_COMMIT = "hold.commit"


class ApprovalStatus(enum.StrEnum):
    PENDING = "pending"
    APPROVED = "approved"
    DENIED = "denied"
    EXPIRED = "expired"


@dataclass(frozen=True, kw_only=True)
class Approval:
    """One approval. ``key`` is the ledger key its request was recorded under.

    ``hold_id`` is the gated hold of a ``hold.commit`` action (None for any
    other); ``hold_expires_at`` is that hold's own expiry before the approval
    stretched it to ``expires_at`` (a pending approval keeps its hold alive),
    restored once a person has decided.
    """

    id: str
    tenant: str
    key: str
    workflow_id: str | None
    requested_by: str  # the agent id of the key that asked
    summary: str
    evidence: Any  # any JSON value
    action: dict[str, Any] | None
    status: ApprovalStatus
    created_at: datetime
    updated_at: datetime
    expires_at: datetime
    audit_seq: int
    hold_id: str | None = None
    hold_expires_at: datetime | None = None
    decided_by: str | None = None  # the agent id of the reviewer's key
    decided_at: datetime | None = None
    note: str | None = None

    def status_at(self, now: datetime) -> ApprovalStatus:
        """The status a reader sees: a pending approval past its expiry is expired."""
        if self.status is ApprovalStatus.PENDING and self.expires_at <= now:
            return ApprovalStatus.EXPIRED
        return self.status


@dataclass(frozen=True, kw_only=True)
class ApprovalRules:
    """Which commits need a person's approval; a rule left ``None`` never matches.

    ``attendees_more_than``: more attendees than this; ``longer_than_minutes``:
    a hold longer than this; ``priority_at_least``: a hold of this priority or
    above; ``outside_domains``: an attendee with no email in one of these
    domains (or a subdomain of one).
    """

    attendees_more_than: int | None = None
    longer_than_minutes: int | None = None
    priority_at_least: int | None = None
    outside_domains: tuple[str, ...] | None = None


@dataclass(frozen=True)
class DirectoryEntry:
    """An attendee as the directory knows it: its id, name and emails (sorted)."""

    id: str
    name: str | None
    emails: tuple[str, ...]


@dataclass(frozen=True, kw_only=True)
class Session:
    """A dashboard sign-in: the hash of its cookie's token, and the key it stands for.

    The key is read again (by id) on every use: a revoked key ends its sessions.
    """

    token_hash: str
    key_id: str
    tenant: str
    created_at: datetime
    expires_at: datetime
