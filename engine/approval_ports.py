"""Ports of approvals, the tenant's approval policy and dashboard sessions.

Part of engine/ports.py (which re-exports them), kept apart as the outbox's
and the providers' ports are: what engine/usecases/approvals.py,
engine/usecases/approval_policy.py and engine/usecases/sessions.py need
from the store.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import Protocol

from slotward.engine.approvals import Approval, ApprovalRules, ApprovalStatus, Session

__all__ = ["Approvals", "Sessions"]


class Approvals(Protocol):
    """A tenant's approvals (ids are global, ``appr_...``; reads see one tenant's)."""

    def add(self, approval: Approval) -> None:
        """Store a new approval; a second one for the same ``(tenant, hold_id)`` is
        refused by the store (an integrity error): one approval per hold commit."""
        ...

    def get(self, tenant: str, approval_id: str) -> Approval | None: ...

    def for_hold(self, tenant: str, hold_id: str) -> Approval | None:
        """The approval gating this hold's commit, if any."""
        ...

    def save(self, approval: Approval) -> None:
        """Write back the mutable fields: status, decided_by, decided_at, note, updated_at."""
        ...

    def search(
        self,
        tenant: str,
        *,
        statuses: Collection[ApprovalStatus] | None,
        after_id: str | None,
        limit: int,
        now: datetime,
    ) -> list[Approval]:
        """The tenant's approvals by id (oldest first), after ``after_id``, matching
        ``statuses`` as readers see them at ``now`` (a pending one past its expiry
        is expired)."""
        ...

    def due_for_expiry(self, now: datetime, limit: int) -> list[Approval]:
        """Pending approvals whose expiry is at or before ``now``, by expiry then id,
        over every tenant (the sweeper's)."""
        ...

    def settled(self, tenant: str, approval_ids: Collection[str], now: datetime) -> list[str]:
        """Which of ``approval_ids`` are no longer pending as seen at ``now`` (or are
        unknown): the waiters' fallback look (api/completions.py)."""
        ...

    def rules(self, tenant: str) -> tuple[ApprovalRules, datetime, str] | None:
        """The tenant's approval policy, when it was set and by whom; None: never set."""
        ...

    def put_rules(self, tenant: str, rules: ApprovalRules, now: datetime, by: str) -> None:
        """Replace the tenant's approval policy."""
        ...


class Sessions(Protocol):
    """Dashboard sessions, by the SHA-256 of their cookie's token."""

    def add(self, session: Session) -> None: ...

    def get(self, token_hash: str) -> Session | None:
        """The session with this hash, expired or not (the caller judges)."""
        ...

    def remove(self, token_hash: str) -> bool: ...

    def purge(self, now: datetime, limit: int) -> int:
        """Delete up to ``limit`` sessions expired at ``now``; return how many."""
        ...
