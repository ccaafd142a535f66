"""In-memory approvals, approval policies and dashboard sessions.

The rest of engine/fakes.py (which builds its units of work from these), as
adapters/store/approval_repos.py beside the SQL store's repos.py. Same
contract as the SQL repositories (tests/contract runs over all three): one
approval per hold commit, lists by id, the overdue by expiry then id.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Collection
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING

from slotward.engine.approvals import Approval, ApprovalRules, ApprovalStatus, Session

if TYPE_CHECKING:  # fakes.py imports this module
    from slotward.engine.fakes import State

__all__ = ["FakeApprovals", "FakeSessions"]

# The fields ``Approvals.save`` writes back, as the SQL store's update does.
_MUTABLE = ("status", "decided_by", "decided_at", "note", "updated_at")


class FakeApprovals:
    def __init__(self, state: Callable[[], State]) -> None:
        self._state = state

    def _of(self, tenant: str) -> list[Approval]:
        found = (a for (t, _), a in self._state().approvals.items() if t == tenant)
        return sorted(found, key=lambda a: a.id)

    def add(self, approval: Approval) -> None:
        approvals = self._state().approvals
        if any(approval_id == approval.id for _, approval_id in approvals):
            raise KeyError(f"duplicate approval id {approval.id}")
        if approval.hold_id is not None and self.for_hold(approval.tenant, approval.hold_id):
            raise KeyError(f"hold {approval.hold_id} has an approval already")
        approvals[(approval.tenant, approval.id)] = approval

    def get(self, tenant: str, approval_id: str) -> Approval | None:
        return self._state().approvals.get((tenant, approval_id))

    def for_hold(self, tenant: str, hold_id: str) -> Approval | None:
        return next((a for a in self._of(tenant) if a.hold_id == hold_id), None)

    def save(self, approval: Approval) -> None:
        approvals = self._state().approvals
        stored = approvals.get((approval.tenant, approval.id))
        if stored is not None:  # only the mutable fields are written back, as in SQL
            changed = {name: getattr(approval, name) for name in _MUTABLE}
            approvals[(approval.tenant, approval.id)] = replace(stored, **changed)

    def search(
        self,
        tenant: str,
        *,
        statuses: Collection[ApprovalStatus] | None,
        after_id: str | None,
        limit: int,
        now: datetime,
    ) -> list[Approval]:
        found = (
            a
            for a in self._of(tenant)
            if (statuses is None or a.status_at(now) in statuses)
            and (after_id is None or a.id > after_id)
        )
        return list(itertools.islice(found, limit))

    def due_for_expiry(self, now: datetime, limit: int) -> list[Approval]:
        due = [
            a
            for a in self._state().approvals.values()
            if a.status is ApprovalStatus.PENDING and a.expires_at <= now
        ]
        return sorted(due, key=lambda a: (a.expires_at, a.id))[:limit]

    def settled(self, tenant: str, approval_ids: Collection[str], now: datetime) -> list[str]:
        out = []
        for approval_id in approval_ids:
            found = self.get(tenant, approval_id)
            if found is None or found.status_at(now) is not ApprovalStatus.PENDING:
                out.append(approval_id)
        return out

    def rules(self, tenant: str) -> tuple[ApprovalRules, datetime, str] | None:
        return self._state().approval_rules.get(tenant)

    def put_rules(self, tenant: str, rules: ApprovalRules, now: datetime, by: str) -> None:
        self._state().approval_rules[tenant] = (rules, now, by)


class FakeSessions:
    def __init__(self, state: Callable[[], State]) -> None:
        self._state = state

    def add(self, session: Session) -> None:
        sessions = self._state().sessions
        if session.token_hash in sessions:
            raise KeyError("duplicate session")
        sessions[session.token_hash] = session

    def get(self, token_hash: str) -> Session | None:
        return self._state().sessions.get(token_hash)

    def remove(self, token_hash: str) -> bool:
        return self._state().sessions.pop(token_hash, None) is not None

    def purge(self, now: datetime, limit: int) -> int:
        sessions = self._state().sessions
        due = sorted((s.expires_at, h) for h, s in sessions.items() if s.expires_at <= now)
        for _, token_hash in due[:limit]:
            del sessions[token_hash]
        return len(due[:limit])
