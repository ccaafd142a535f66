"""Ports of the idempotency ledger: its records, and what a create and a replay read.

Part of engine/ports.py, which re-exports them.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from slotward.engine.model import Hold, HoldStatus, LedgerRecord

__all__ = ["ClaimLookup", "Ledger", "ReplayState"]


@dataclass(frozen=True, slots=True)
class ReplayState:
    """What a known create's replay is answered from (:meth:`Ledger.replay_state`).

    Of its record only what the answer is made of, not a whole
    :class:`LedgerRecord`: a replay is the hottest read there is, and the
    rest (four instants, the lease) would be decoded for nothing.
    """

    key: str  # as stored (a client's key with its prefix)
    fingerprint: str
    created: bool
    body: bytes
    hold_id: str | None
    hold_status: HoldStatus | None  # as stored (None: no hold, or none any more)
    hold_expires_at: datetime | None
    directory: dict[str, str]  # the emails asked about that are in it, and their ids


@dataclass(frozen=True, slots=True)
class ClaimLookup:
    """What a create reads before it decides (:meth:`Ledger.lookup_claim`)."""

    record: LedgerRecord | None  # under the call's key
    live: Hold | None  # the live hold of the call's intent
    calendars_bound: bool  # False: no attendee has a calendar to read
    # False: the tenant has no active webhook subscription. With no calendar
    # bound either, nothing can want the create's event: it is written
    # delivered, and the relay has nothing to do for it.
    subscribed: bool = True
    # The ids of the active holds of the attendees overlapping the claim's span
    # (those :meth:`HoldRepository.blocking` judges), when the span was asked
    # about: read in the same statement, after the same locks; None if not asked.
    overlapping: tuple[str, ...] | None = None


class Ledger(Protocol):
    def get(self, tenant: str, key: str) -> LedgerRecord | None: ...

    def replay_state(self, tenant: str, key: str, emails: Collection[str]) -> ReplayState | None:
        """What a replay needs of the record under ``key``, its hold's status and
        expiry, and where ``emails`` point in the directory, read together in
        one statement; None without a record."""
        ...

    def lookup_claim(
        self,
        tenant: str,
        key: str,
        workflow_id: str,
        intent_fp: str,
        attendees: Collection[str],
        now: datetime,
        span: tuple[datetime, datetime] | None = None,
    ) -> ClaimLookup:
        """What a create reads before it decides, in one read: the record under
        ``key``, the intent's live hold (the oldest held and unexpired, or
        committed, hold of this workflow with this intent), whether any of
        ``attendees`` has a calendar bound, whether the tenant has an active
        webhook subscription and, given a ``span``, the ids of the attendees'
        active holds overlapping it."""
        ...

    def find_by_fingerprint(self, tenant: str, fingerprint: str) -> LedgerRecord | None:
        """The first record of the call with this fingerprint, under any key."""
        ...

    def add(self, record: LedgerRecord) -> None: ...

    def save(self, record: LedgerRecord) -> None:
        """Write back a record's mutable fields (state, answer, lease, times)."""
        ...

    def remove(self, tenant: str, key: str) -> None:
        """Forget a record: its key executes again (a retryable failure)."""
        ...

    def for_workflow(self, tenant: str, workflow_id: str, limit: int) -> list[LedgerRecord]:
        """The workflow's generic executions (not hold records), oldest first."""
        ...

    def purgeable_tenant(self, now: datetime) -> str | None:
        """Some tenant with a record past retention (and no live lease), if any."""
        ...

    def purge(self, tenant: str, now: datetime, limit: int) -> int:
        """Delete up to ``limit`` of the tenant's records past retention; return how many."""
        ...
