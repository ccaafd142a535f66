"""The hold repository over one synchronous SQLAlchemy Core connection.

Statements are built once, at import, with bind parameters: building a Core
statement per call (and hashing it for the compiled cache) cost more than
running it. The search query, whose shape depends on its filters, is the only
one built per call.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime, timedelta
from typing import Any

import orjson
from sqlalchemy import (
    and_,
    bindparam,
    exists,
    false,
    func,
    insert,
    literal_column,
    or_,
    select,
    update,
)
from sqlalchemy.sql.elements import ColumnElement

from slotward.adapters.store import tables as t
from slotward.adapters.store.instants import from_us, opt_from_us, opt_to_us, to_us
from slotward.adapters.store.runner import Row, Runner
from slotward.engine.model import Hold, HoldStatus

__all__ = ["LIVE_INTENT_ID", "OVERLAPPING_IDS", "SqlHolds", "hold_from_row", "lookback_us"]

# The statuses' values read once: an enum member's ``.value`` is a property
# call, three a row where every claim filters its attendees' holds.
_HELD, _COMMITTED = HoldStatus.HELD.value, HoldStatus.COMMITTED.value
_ACTIVE = (_HELD, _COMMITTED)
_h = t.holds.c
_ha = t.hold_attendees.c

_BLOCKING = or_(
    _h.status == HoldStatus.COMMITTED.value,
    and_(_h.status == HoldStatus.HELD.value, _h.expires_us > bindparam("now")),
)
_GET = select(t.holds).where(_h.id == bindparam("id"), _h.tenant == bindparam("tenant"))
# The id of the oldest live hold of an intent, for the claim's lookup that reads
# it beside the record (ledger_repo.py); never correlated with a ``holds`` of
# the outer statement.
LIVE_INTENT_ID = (
    select(_h.id)
    .where(
        _h.tenant == bindparam("tenant"),
        _h.workflow_id == bindparam("workflow_id"),
        _h.intent_fp == bindparam("intent_fp"),
        _BLOCKING,
    )
    .order_by(_h.id)
    .limit(1)
    .correlate(None)
    .scalar_subquery()
)
# Holds last at most max_hold, so one that overlaps [s, e) starts after
# s - max_hold: bounding the scan keeps it flat however many rows exist.
_OVERLAPS = (
    _ha.tenant == bindparam("tenant"),
    _ha.attendee.in_(bindparam("attendees", expanding=True)),
    _ha.start_us < bindparam("end"),
    _ha.start_us > bindparam("lookback"),
    _ha.end_us > bindparam("start"),
    _ha.active.is_(True),
)
_OVERLAPPING = select(_ha.hold_id).where(*_OVERLAPS).distinct()
# The same ids joined by commas (an id has none; NULL for none), for the claim's
# lookup that reads them beside the record (ledger_repo.py), after the same
# locks: the blockers' read then costs no statement of its own.
_OVERLAP = _OVERLAPPING.correlate(None).subquery("overlap")
_COMMA: ColumnElement[str] = literal_column("','")
OVERLAPPING_IDS = {  # by dialect: SQLite's aggregate, PostgreSQL's
    name: select(join(_OVERLAP.c.hold_id, _COMMA)).scalar_subquery()
    for name, join in (("sqlite", func.group_concat), ("postgresql", func.string_agg))
}
# The spans alone, in one statement: the index's own start and end, and only
# the status and expiry of each hold, fetched by primary key (nothing but the
# attendee index is constrained, so that is where the scan starts). A hold of
# several of the attendees comes once per attendee.
_SPANS = (
    select(_ha.hold_id, _ha.start_us, _ha.end_us, _h.status, _h.expires_us)
    .select_from(t.hold_attendees.join(t.holds, _h.id == _ha.hold_id))
    .where(*_OVERLAPS)
)
# A second statement, so the holds are fetched by primary key: inside one,
# SQLite may prefer the status index and walk every live hold. For the same
# reason their status and expiry are judged here, not in the WHERE clause.
_BY_IDS = select(t.holds).where(_h.id.in_(bindparam("ids", expanding=True)))
_DUE = (
    select(t.holds)
    .where(_h.status == HoldStatus.HELD.value, _h.expires_us <= bindparam("now"))
    .order_by(_h.expires_us, _h.id)  # the oldest overdue first; ties by id, as the fakes
    .limit(bindparam("limit"))
)
# The dashboard's timeline: ix_holds_tenant_start_id, bounded below by the
# earliest start a hold overlapping the window may have, in the index's order.
_WINDOW = (
    select(t.holds)
    .where(
        _h.tenant == bindparam("tenant"),
        _h.start_us >= bindparam("earliest"),
        _h.start_us < bindparam("end"),
        _h.end_us > bindparam("start"),
    )
    .order_by(_h.start_us, _h.id)
    .limit(bindparam("limit"))
)
_INSERT = insert(t.holds)
_INSERT_ATTENDEES = insert(t.hold_attendees)
_MUTABLE = (
    "status", "token", "expires_us", "updated_us", "committed_us", "preempted_by", "event_seq"
)  # fmt: skip
_UPDATE = (
    update(t.holds)
    .where(_h.id == bindparam("w_hold_id"))
    .values({name: bindparam(f"v_{name}") for name in _MUTABLE})
)
_SET_ACTIVE = (
    update(t.hold_attendees)
    .where(_ha.hold_id == bindparam("w_hold_id"))
    .values(active=bindparam("v_active"))
)


def hold_from_row(m: Row) -> Hold:
    return Hold(
        id=m["id"],
        key=m["key"],
        tenant=m["tenant"],
        workflow_id=m["workflow_id"],
        agent_id=m["agent_id"],
        attendees=tuple(orjson.loads(m["attendees"])),  # JSON text, with or without spaces
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
        event_seq=m["event_seq"],
    )


def lookback_us(max_hold: timedelta) -> int:
    """How far before a span a hold overlapping it may start (_OVERLAPS' ``lookback``)."""
    return max_hold // timedelta(microseconds=1)


def overlap_params(start: datetime, end: datetime, lookback: int) -> dict[str, int]:
    """The span's parameters of _OVERLAPS (beside ``tenant`` and ``attendees``)."""
    s = to_us(start)
    return {"start": s, "end": to_us(end), "lookback": s - lookback}


class SqlHolds:
    def __init__(self, db: Runner, max_hold: timedelta) -> None:
        self._db = db
        self._lookback = lookback_us(max_hold)
        # The active holds last found overlapping a span, by the span asked
        # for: a claim asks for its blockers and for the stale ones among them
        # (in either order), and the second question costs no round trip. Any
        # write of a hold forgets them, and so does every transaction boundary
        # (``forget``): another writer may have committed since.
        self._seen: tuple[tuple[Any, ...], list[Row]] | None = None

    def forget(self) -> None:
        """Drop what was read: the unit of work begins, commits or rolls back."""
        self._seen = None

    def get(self, tenant: str, hold_id: str) -> Hold | None:
        row = self._db.first(_GET, {"id": hold_id, "tenant": tenant})
        return None if row is None else hold_from_row(row)

    def blocking(
        self,
        tenant: str,
        attendees: Collection[str],
        start: datetime,
        end: datetime,
        now: datetime,
        *,
        overlapping: Collection[str] | None = None,
    ) -> list[Hold]:
        now_us = to_us(now)
        rows = self._overlapping(tenant, attendees, start, end, overlapping)
        return [
            hold_from_row(r)
            for r in rows
            if r["status"] == _COMMITTED or (r["status"] == _HELD and r["expires_us"] > now_us)
        ]

    def blocking_spans(
        self, tenant: str, attendees: Collection[str], start: datetime, end: datetime, now: datetime
    ) -> list[tuple[datetime, datetime]]:
        now_us = to_us(now)
        spans: dict[str, tuple[int, int]] = {}
        for r in self._db.rows(_SPANS, self._span_params(tenant, attendees, start, end)):
            status = r["status"]
            if status == _COMMITTED or (status == _HELD and r["expires_us"] > now_us):
                spans[r["hold_id"]] = (r["start_us"], r["end_us"])
        return [(from_us(s), from_us(e)) for s, e in sorted(spans.values())]

    def stale(
        self, tenant: str, attendees: Collection[str], start: datetime, end: datetime, now: datetime
    ) -> list[Hold]:
        now_us = to_us(now)
        rows = self._overlapping(tenant, attendees, start, end)
        return [
            hold_from_row(r) for r in rows if r["status"] == _HELD and r["expires_us"] <= now_us
        ]

    def _overlapping(
        self,
        tenant: str,
        attendees: Collection[str],
        start: datetime,
        end: datetime,
        ids: Collection[str] | None = None,
    ) -> list[Row]:
        """Active holds of ``attendees`` overlapping [start, end), by start and id;
        ``ids``: theirs, read already in this transaction (OVERLAPPING_IDS)."""
        s = to_us(start)
        key = (tenant, frozenset(attendees), s, to_us(end))
        if self._seen is not None and self._seen[0] == key:
            return self._seen[1]
        if ids is None:
            ids = self._db.scalars(_OVERLAPPING, self._span_params(tenant, attendees, start, end))
        rows = self._db.rows(_BY_IDS, {"ids": list(ids)}) if ids else []
        rows.sort(key=lambda r: (r["start_us"], r["id"]))
        self._seen = (key, rows)
        return rows

    def _span_params(
        self, tenant: str, attendees: Collection[str], start: datetime, end: datetime
    ) -> dict[str, Any]:
        return {"tenant": tenant, "attendees": list(attendees),
                **overlap_params(start, end, self._lookback)}  # fmt: skip

    def add(self, hold: Hold) -> None:
        self._seen = None
        self._db.put(_INSERT, _hold_values(hold))
        active = hold.status.value in _ACTIVE  # as ``save`` sets it
        self._db.put(
            _INSERT_ATTENDEES,
            [
                {
                    "hold_id": hold.id,
                    "attendee": a,
                    "tenant": hold.tenant,
                    "start_us": to_us(hold.start),
                    "end_us": to_us(hold.end),
                    "active": active,
                }
                for a in hold.attendees
            ],
        )

    def save(self, hold: Hold) -> None:
        self._seen = None
        values = _hold_values(hold)
        self._db.put(_UPDATE, {"w_hold_id": hold.id, **{f"v_{k}": values[k] for k in _MUTABLE}})
        active = hold.status.value in _ACTIVE
        self._db.put(_SET_ACTIVE, {"w_hold_id": hold.id, "v_active": active})

    def due_for_expiry(self, now: datetime, limit: int) -> list[Hold]:
        rows = self._db.rows(_DUE, {"now": to_us(now), "limit": limit})
        return [hold_from_row(r) for r in rows]

    def window(
        self, tenant: str, start: datetime, end: datetime, earliest_start: datetime, limit: int
    ) -> list[Hold]:
        params = {"tenant": tenant, "start": to_us(start), "end": to_us(end),
                  "earliest": to_us(earliest_start), "limit": limit}  # fmt: skip
        return [hold_from_row(r) for r in self._db.rows(_WINDOW, params)]

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
        q = select(t.holds).where(_h.tenant == tenant).order_by(_h.id).limit(limit)
        if workflow_id is not None:
            q = q.where(_h.workflow_id == workflow_id)
        if after_id is not None:
            q = q.where(_h.id > after_id)
        if attendee is not None:
            q = q.where(exists().where(_ha.hold_id == _h.id, _ha.attendee == attendee))
        if statuses is not None:
            q = q.where(_status_clause(statuses, to_us(now)))
        return [hold_from_row(r) for r in self._db.dynamic(q)]


def _status_clause(statuses: Collection[HoldStatus], now_us: int) -> Any:
    """Match statuses as readers see them: a held hold past expiry is expired."""
    parts = []
    for status in statuses:
        if status is HoldStatus.HELD:
            parts.append(and_(_h.status == "held", _h.expires_us > now_us))
        elif status is HoldStatus.EXPIRED:
            parts.append(
                or_(_h.status == "expired", and_(_h.status == "held", _h.expires_us <= now_us))
            )
        else:
            parts.append(_h.status == status.value)
    return or_(false(), *parts)  # no status asked for: nothing matches


def _hold_values(hold: Hold) -> dict[str, Any]:
    return {
        "id": hold.id,
        "tenant": hold.tenant,
        "key": hold.key,
        "workflow_id": hold.workflow_id,
        "agent_id": hold.agent_id,
        "attendees": orjson.dumps(list(hold.attendees)).decode(),
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
        "committed_us": opt_to_us(hold.committed_at),
        "preempted_by": hold.preempted_by,
        "audit_seq": hold.audit_seq,
        "event_seq": hold.event_seq,
    }
