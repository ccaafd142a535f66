"""In-memory repositories of the operational records, the gauges and the API keys.

The rest of engine/fakes.py (which builds its units of work from these): as
adapters/store/ops_repos.py beside the SQL store's repos.py.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING

from slotward.engine.model import Gauges, HoldStatus, Principal, WorkflowStats

if TYPE_CHECKING:  # fakes.py imports this module
    from slotward.engine.fakes import State

__all__ = ["FakeKeys", "FakeStats", "FakeWorkflows"]


class FakeWorkflows:
    def __init__(self, state: Callable[[], State]) -> None:
        self._state = state

    def get(self, tenant: str, workflow_id: str) -> WorkflowStats | None:
        return self._state().workflows.get((tenant, workflow_id))

    def _row(self, tenant: str, workflow_id: str) -> WorkflowStats:
        found = self.get(tenant, workflow_id)
        return found or WorkflowStats(tenant, workflow_id, 0, None, None, 0)

    def add_replays(
        self, tenant: str, counts: Mapping[str, tuple[int, datetime]], *, read_back: int = 0
    ) -> dict[str, WorkflowStats]:
        added: dict[str, WorkflowStats] = {}
        for workflow_id, (count, last_at) in counts.items():
            row = self._row(tenant, workflow_id)
            last = last_at if row.last_replay_at is None else max(row.last_replay_at, last_at)
            new = replace(row, replays=row.replays + count, last_replay_at=last)
            self._state().workflows[(tenant, workflow_id)] = new
            if new.replays >= read_back or new.storm_at is not None:
                added[workflow_id] = new
        return added

    def mark_storm(self, tenant: str, workflow_id: str, at: datetime) -> None:
        row = self._row(tenant, workflow_id)
        self._state().workflows[(tenant, workflow_id)] = replace(
            row, storm_at=at, storms=row.storms + 1
        )

    def add_replay_seconds(
        self, tenant: str, buckets: Mapping[str, Mapping[datetime, int]]
    ) -> None:
        seconds = self._state().replay_seconds
        for workflow_id, by_second in buckets.items():
            for second, count in by_second.items():
                key = (tenant, workflow_id, second)
                seconds[key] = seconds.get(key, 0) + count

    def replays_since(self, tenant: str, workflow_id: str, since: datetime) -> int:
        seconds = self._state().replay_seconds.items()
        return sum(n for (t, w, s), n in seconds if (t, w) == (tenant, workflow_id) and s >= since)

    def forget_replays_before(self, tenant: str, before: datetime) -> None:
        state = self._state()
        state.replay_seconds = {
            k: n for k, n in state.replay_seconds.items() if k[0] != tenant or k[2] >= before
        }

    def tenant_with_replays_before(self, before: datetime) -> str | None:
        old = [t for (t, _, s) in self._state().replay_seconds if s < before]
        return min(old, default=None)

    def busiest(self, tenant: str, limit: int) -> list[WorkflowStats]:
        rows = [w for (t, _), w in self._state().workflows.items() if t == tenant]
        return sorted(rows, key=lambda w: (-w.replays, w.workflow_id))[:limit]


class FakeStats:
    def __init__(self, state: Callable[[], State]) -> None:
        self._state = state

    def gauges(self, now: datetime) -> Gauges:
        state = self._state()
        by_status: dict[str, int] = {}
        for hold in state.holds.values():
            status = hold.status_at(now).value
            by_status[status] = by_status.get(status, 0) + 1
        overdue = [
            h.expires_at for h in state.holds.values()
            if h.status is HoldStatus.HELD and h.expires_at <= now
        ]  # fmt: skip
        leases = [r.lease_expires_at for r in state.ledger.values() if r.state == "executing"]
        executing = sum(1 for end in leases if end is not None and end > now)
        pending = [e.created_at for e in state.outbox if e.state == "pending"]
        failing = {
            s.id: s.consecutive_failures for s in state.webhooks.values()
            if s.consecutive_failures > 0
        }  # fmt: skip
        return Gauges(
            by_status,
            len(pending),
            min(overdue, default=None),
            executing,
            oldest_pending_event=min(pending, default=None),
            dead_events=sum(1 for e in state.outbox if e.state == "dead"),
            failing_subscriptions=failing,
        )


class FakeKeys:
    def __init__(self, state: Callable[[], State]) -> None:
        self._state = state

    def find(self, key_hash: str) -> Principal | None:
        return self._state().keys.get(key_hash)

    def by_id(self, key_id: str) -> tuple[str, Principal] | None:
        key_hash = self._state().key_ids.get(key_id)
        principal = None if key_hash is None else self._state().keys.get(key_hash)
        return None if key_hash is None or principal is None else (key_hash, principal)

    def add(self, key_id: str, key_hash: str, principal: Principal, now: datetime) -> None:
        state = self._state()
        taken = key_hash in state.keys or key_hash in state.revoked.values()
        if taken or key_id in state.key_ids or key_id in state.revoked:
            raise KeyError(f"duplicate key id {key_id} or hash")
        state.keys[key_hash] = principal
        state.key_ids[key_id] = key_hash

    def rehash(self, key_id: str, old_hash: str, new_hash: str) -> bool:
        state = self._state()
        if state.key_ids.get(key_id) != old_hash or old_hash not in state.keys:
            return False
        state.keys[new_hash] = state.keys.pop(old_hash)
        state.key_ids[key_id] = new_hash
        return True

    def revoke(self, key_id: str, now: datetime) -> bool:
        state = self._state()
        key_hash = state.key_ids.pop(key_id, None)
        if key_hash is None:
            return False
        state.revoked[key_id] = key_hash
        return state.keys.pop(key_hash, None) is not None
