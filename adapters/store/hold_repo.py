"""The hold repository over one synchronous SQLAlchemy Core connection."""

from __future__ import annotations

import json
from collections.abc import Collection
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Connection, and_, exists, insert, or_, select, update
from sqlalchemy.engine import Row

from slotward.adapters.store import tables as t
from slotward.adapters.store.instants import from_us, opt_from_us, to_us
from slotward.engine.model import Hold, HoldStatus

__all__ = ["SqlHolds"]

_ACTIVE = (HoldStatus.HELD.value, HoldStatus.COMMITTED.value)


def _hold(row: Row[Any]) -> Hold:
    m = row._mapping
    return Hold(
        id=m["id"],
        key=m["key"],
        tenant=m["tenant"],
        workflow_id=m["workflow_id"],
        agent_id=m["agent_id"],
        attendees=tuple(json.loads(m["attendees"])),
        start=from_us(m["start_us"]),
        end=from_us(m["end_us"]),
        title=m["title"],
        description=m["description"],
        priority=m["priority"],
        status=HoldStatus(m["status"]),
        expires_at=from_us(m["expires_us"]),
        token=m["token"],
        intent_fp=m["intent_fp"],
        created_at=from_us(m["created_us"]),
        updated_at=from_us(m["updated_us"]),
        audit_seq=m["audit_seq"],
        committed_at=opt_from_us(m["committed_us"]),
        preempted_by=m["preempted_by"],
    )


def _blocking_clause(now_us: int) -> Any:
    return or_(
        t.holds.c.status == HoldStatus.COMMITTED.value,
        and_(t.holds.c.status == HoldStatus.HELD.value, t.holds.c.expires_us > now_us),
    )


class SqlHolds:
    def __init__(self, conn: Connection, max_hold: timedelta) -> None:
        self._conn = conn
        self._lookback = max_hold // timedelta(microseconds=1)

    def get(self, tenant: str, hold_id: str) -> Hold | None:
        q = select(t.holds).where(t.holds.c.id == hold_id, t.holds.c.tenant == tenant)
        row = self._conn.execute(q).first()
        return None if row is None else _hold(row)

    def find_live_intent(
        self, tenant: str, workflow_id: str, intent_fp: str, now: datetime
    ) -> Hold | None:
        q = (
            select(t.holds)
            .where(
                t.holds.c.tenant == tenant,
                t.holds.c.workflow_id == workflow_id,
                t.holds.c.intent_fp == intent_fp,
                _blocking_clause(to_us(now)),
            )
            .order_by(t.holds.c.id)
            .limit(1)
        )
        row = self._conn.execute(q).first()
        return None if row is None else _hold(row)

    def blocking(
        self, tenant: str, attendees: Collection[str], start: datetime, end: datetime, now: datetime
    ) -> list[Hold]:
        s, e = to_us(start), to_us(end)
        ha = t.hold_attendees
        # Holds last at most max_hold, so one that overlaps [s, e) starts after
        # s - max_hold: bounding the scan keeps it flat however many rows exist.
        overlapping = (
            select(ha.c.hold_id)
            .where(
                ha.c.tenant == tenant,
                ha.c.attendee.in_(list(attendees)),
                ha.c.start_us < e,
                ha.c.start_us > s - self._lookback,
                ha.c.end_us > s,
                ha.c.active.is_(True),
            )
            .distinct()
        )
        ids = list(self._conn.execute(overlapping).scalars())
        if not ids:
            return []
        # Two statements, so the holds are fetched by primary key: inside one,
        # SQLite may prefer the status index and walk every live hold.
        q = (
            select(t.holds)
            .where(t.holds.c.id.in_(ids), _blocking_clause(to_us(now)))
            .order_by(t.holds.c.start_us, t.holds.c.id)
        )
        return [_hold(r) for r in self._conn.execute(q)]

    def add(self, hold: Hold) -> None:
        self._conn.execute(insert(t.holds).values(**_hold_values(hold)))
        self._conn.execute(
            insert(t.hold_attendees),
            [
                {
                    "hold_id": hold.id,
                    "attendee": a,
                    "tenant": hold.tenant,
                    "start_us": to_us(hold.start),
                    "end_us": to_us(hold.end),
                    "active": True,
                }
                for a in hold.attendees
            ],
        )

    def save(self, hold: Hold) -> None:
        values = _hold_values(hold)
        mutable = {
            k: values[k]
            for k in ("status", "token", "expires_us", "updated_us", "committed_us", "preempted_by")
        }
        self._conn.execute(update(t.holds).where(t.holds.c.id == hold.id).values(**mutable))
        active = hold.status.value in _ACTIVE
        self._conn.execute(
            update(t.hold_attendees)
            .where(t.hold_attendees.c.hold_id == hold.id)
            .values(active=active)
        )

    def due_for_expiry(self, now: datetime, limit: int) -> list[Hold]:
        q = (
            select(t.holds)
            .where(t.holds.c.status == HoldStatus.HELD.value, t.holds.c.expires_us <= to_us(now))
            .order_by(t.holds.c.expires_us)
            .limit(limit)
        )
        return [_hold(r) for r in self._conn.execute(q)]

    def search(
        self,
        tenant: str,
        *,
        workflow_id: str | None,
        statuses: Collection[HoldStatus] | None,
        attendee: str | None,
        after_id: str | None,
        limit: int,
        now: datetime,
    ) -> list[Hold]:
        h = t.holds
        q = select(h).where(h.c.tenant == tenant).order_by(h.c.id).limit(limit)
        if workflow_id is not None:
            q = q.where(h.c.workflow_id == workflow_id)
        if after_id is not None:
            q = q.where(h.c.id > after_id)
        if attendee is not None:
            ha = t.hold_attendees
            q = q.where(exists().where(ha.c.hold_id == h.c.id, ha.c.attendee == attendee))
        if statuses is not None:
            q = q.where(_status_clause(statuses, to_us(now)))
        return [_hold(r) for r in self._conn.execute(q)]


def _status_clause(statuses: Collection[HoldStatus], now_us: int) -> Any:
    """Match statuses as readers see them: a held hold past expiry is expired."""
    h = t.holds.c
    parts = []
    for status in statuses:
        if status is HoldStatus.HELD:
            parts.append(and_(h.status == "held", h.expires_us > now_us))
        elif status is HoldStatus.EXPIRED:
            parts.append(
                or_(h.status == "expired", and_(h.status == "held", h.expires_us <= now_us))
            )
        else:
            parts.append(h.status == status.value)
    return or_(*parts)


def _hold_values(hold: Hold) -> dict[str, Any]:
    return {
        "id": hold.id,
        "tenant": hold.tenant,
        "key": hold.key,
        "workflow_id": hold.workflow_id,
        "agent_id": hold.agent_id,
        "attendees": json.dumps(list(hold.attendees)),
        "start_us": to_us(hold.start),
        "end_us": to_us(hold.end),
        "title": hold.title,
        "description": hold.description,
        "priority": hold.priority,
        "status": hold.status.value,
        "expires_us": to_us(hold.expires_at),
        "token": hold.token,
        "intent_fp": hold.intent_fp,
        "created_us": to_us(hold.created_at),
        "updated_us": to_us(hold.updated_at),
        "committed_us": None if hold.committed_at is None else to_us(hold.committed_at),
        "preempted_by": hold.preempted_by,
        "audit_seq": hold.audit_seq,
    }
