"""The in-memory idempotency ledger: the rest of engine/fakes.py (which builds its
units of work from it), as adapters/store/ledger_repo.py beside the SQL store's repos."""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import replace
from datetime import datetime
from typing import TYPE_CHECKING, Any

from slotward.engine.model import HoldStatus, LedgerRecord
from slotward.engine.ports import ClaimLookup, ReplayState

if TYPE_CHECKING:  # fakes.py imports this module
    from slotward.engine.fakes import State

__all__ = ["FakeLedger"]


def _fields(value: object, names: Collection[str]) -> dict[str, Any]:
    return {name: getattr(value, name) for name in names}


# The fields ``Ledger.save`` does not write back: every other one it does.
_RECORD_FIXED = ("fingerprint", "created_at", "hold_id", "kind", "workflow_id", "tool")


_ACTIVE = (HoldStatus.HELD, HoldStatus.COMMITTED)


class FakeLedger:
    def __init__(self, state: Callable[[], State]) -> None:
        self._state = state

    def get(self, tenant: str, key: str) -> LedgerRecord | None:
        return self._state().ledger.get((tenant, key))

    def replay_state(self, tenant: str, key: str, emails: Collection[str]) -> ReplayState | None:
        state = self._state()
        record = state.ledger.get((tenant, key))
        if record is None:
            return None
        hold = None if record.hold_id is None else state.holds.get((tenant, record.hold_id))
        found = {e: state.emails[(tenant, e)] for e in emails if (tenant, e) in state.emails}
        return ReplayState(
            key=record.key,
            fingerprint=record.fingerprint,
            created=record.created,
            body=record.body,
            hold_id=record.hold_id,
            hold_status=None if hold is None else hold.status,
            hold_expires_at=None if hold is None else hold.expires_at,
            directory=found,
        )

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
        state = self._state()
        overlapping = None
        if span is not None:  # active as the SQL stores keep it: by status, not expiry
            overlapping = tuple(
                h.id for (t, _), h in state.holds.items()
                if t == tenant and h.status in _ACTIVE and h.start < span[1]
                and h.end > span[0] and set(attendees) & set(h.attendees)
            )  # fmt: skip
        live = [
            h for (t, _), h in state.holds.items()
            if t == tenant and h.workflow_id == workflow_id and h.intent_fp == intent_fp
            and h.blocks_at(now)
        ]  # fmt: skip
        return ClaimLookup(
            record=state.ledger.get((tenant, key)),
            live=min(live, key=lambda h: h.id, default=None),  # the oldest
            calendars_bound=any((tenant, a) in state.bindings for a in attendees),
            subscribed=any(
                s.tenant == tenant and s.status == "active" for s in state.webhooks.values()
            ),
            overlapping=overlapping,
        )

    def find_by_fingerprint(self, tenant: str, fingerprint: str) -> LedgerRecord | None:
        found = [
            r for (t, _), r in self._state().ledger.items()
            if t == tenant and r.fingerprint == fingerprint
        ]  # fmt: skip
        return min(found, key=lambda r: (r.created_at, r.key), default=None)

    def add(self, record: LedgerRecord) -> None:
        ledger = self._state().ledger
        if (record.tenant, record.key) in ledger:
            raise KeyError(f"duplicate ledger key {record.key}")
        ledger[(record.tenant, record.key)] = record

    def save(self, record: LedgerRecord) -> None:
        ledger = self._state().ledger
        stored = ledger.get((record.tenant, record.key))
        if stored is not None:  # what identifies the call stays as first recorded, as in SQL
            ledger[(record.tenant, record.key)] = replace(record, **_fields(stored, _RECORD_FIXED))

    def remove(self, tenant: str, key: str) -> None:
        self._state().ledger.pop((tenant, key), None)

    def for_workflow(self, tenant: str, workflow_id: str, limit: int) -> list[LedgerRecord]:
        found = [
            r for (t, _), r in self._state().ledger.items()
            if t == tenant and r.kind == "execution" and r.workflow_id == workflow_id
        ]  # fmt: skip
        return sorted(found, key=lambda r: (r.created_at, r.key))[:limit]

    def _due(self, now: datetime) -> list[LedgerRecord]:
        return [
            r for r in self._state().ledger.values()
            if r.expires_at <= now and (r.lease_expires_at is None or r.lease_expires_at <= now)
        ]  # fmt: skip

    def purgeable_tenant(self, now: datetime) -> str | None:
        return min((r.tenant for r in self._due(now)), default=None)

    def purge(self, tenant: str, now: datetime, limit: int) -> int:
        due = [r for r in self._due(now) if r.tenant == tenant][:limit]
        for r in due:
            del self._state().ledger[(r.tenant, r.key)]
        return len(due)
