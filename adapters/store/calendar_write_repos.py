"""Calendar writes over one synchronous SQLAlchemy Core connection.

A writer's claim is one ``SELECT ... FOR UPDATE SKIP LOCKED`` (nothing is
rendered on SQLite, whose one writer runs them one at a time): writers side
by side on PostgreSQL claim disjoint batches. A write is enqueued by one
upsert whose update applies only to an older version, so a redelivered or
late event never undoes a newer one, whatever runs at the same time.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from sqlalchemy import Insert, bindparam, delete, func, or_, select, text, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.sql.elements import BindParameter

from slotward.adapters.store import tables as t
from slotward.adapters.store.instants import from_us, opt_from_us, opt_to_us, to_us
from slotward.adapters.store.runner import Row, Runner
from slotward.engine.calendars import CalendarWrite

__all__ = ["SqlCalendarWrites", "write_from_row"]

_w = t.calendar_writes.c
_NOW: BindParameter[Any] = bindparam("now")

# What a newer version replaces: the event itself and when to try it; the
# claim stays its holder's (it records a stale version and leaves it pending).
_WRITE_CONTENT = (
    "uid", "action", "status", "start_us", "end_us", "summary", "description", "version",
    "next_attempt_us", "updated_us", "written_us", "last_error",
)  # fmt: skip
_WRITE_MUTABLE = (
    "state", "attempts", "next_attempt_us", "claim_owner", "claim_until_us", "written_us",
    "last_error",
)  # fmt: skip


def _enqueue(dialect: Any) -> Insert:
    stmt = dialect.insert(t.calendar_writes)
    newer: dict[str, Any] = {name: stmt.excluded[name] for name in _WRITE_CONTENT}
    newer |= {"state": "pending", "attempts": 0}
    return stmt.on_conflict_do_update(  # type: ignore[no-any-return]
        index_elements=[_w.tenant, _w.hold_id, _w.attendee],
        set_=newer,
        where=stmt.excluded.version > _w.version,
    )


_ENQUEUE = {"sqlite": _enqueue(sqlite), "postgresql": _enqueue(postgresql)}
_WRITE_WHERE = (
    _w.tenant == bindparam("w_tenant"),
    _w.hold_id == bindparam("w_hold_id"),
    _w.attendee == bindparam("w_attendee"),
)
_WRITES_DUE = (
    select(t.calendar_writes)
    .where(
        _w.state == "pending",
        _w.next_attempt_us <= _NOW,
        or_(_w.claim_until_us.is_(None), _w.claim_until_us <= _NOW),
    )
    .order_by(_w.next_attempt_us, _w.tenant, _w.hold_id, _w.attendee)
    .limit(bindparam("limit"))
    .with_for_update(skip_locked=True)
)
_WRITE_CLAIM = (
    update(t.calendar_writes)
    .where(*_WRITE_WHERE)
    .values(claim_owner=bindparam("v_owner"), claim_until_us=bindparam("v_until"))
)
# By tenant: the primary key seeks each (hold, attendee) pair; the pairs asked
# for are picked out of the rows.
_WRITES_OF = (
    select(t.calendar_writes)
    .where(
        _w.tenant == bindparam("tenant"),
        _w.hold_id.in_(bindparam("holds", expanding=True)),
        _w.attendee.in_(bindparam("attendees", expanding=True)),
    )
    .order_by(_w.hold_id, _w.attendee)
)
# Only the version that was read: a newer one enqueued meanwhile stays as it is.
_WRITE_SAVE = (
    update(t.calendar_writes)
    .where(*_WRITE_WHERE, _w.version == bindparam("w_version"))
    .values({name: bindparam(f"v_{name}") for name in _WRITE_MUTABLE})
)
_WRITE_COUNTS = (
    select(_w.state, func.count().label("n"))
    .where(_w.tenant == bindparam("tenant"), _w.attendee == bindparam("attendee"))
    .group_by(_w.state)
)
_WRITES_REMOVE = delete(t.calendar_writes).where(
    _w.tenant == bindparam("tenant"), _w.attendee == bindparam("attendee")
)
_WRITES_REVIVE = (
    update(t.calendar_writes)
    .where(
        _w.tenant == bindparam("w_tenant"),
        _w.attendee == bindparam("w_attendee"),
        _w.state == "dead",
    )
    .values(
        state="pending",
        attempts=0,
        next_attempt_us=bindparam("v_now"),
        claim_owner=None,
        claim_until_us=None,
        updated_us=bindparam("v_now"),
    )
)
_WRITTEN = (
    select(_w.tenant, _w.hold_id, _w.attendee)
    # As its index's condition is written (migration 0011): the index holds
    # these alone, in the order they were written, so a sweep reads only the
    # ones old enough, not every write delivered.
    .where(
        text(t.CALENDAR_WRITE_DELETE),
        _w.state == "delivered",
        _w.written_us < bindparam("before"),
    )
    .order_by(_w.written_us, _w.tenant, _w.hold_id, _w.attendee)
    .limit(bindparam("limit"))
)
_WRITE_REMOVE = delete(t.calendar_writes).where(*_WRITE_WHERE)


def write_from_row(r: Row) -> CalendarWrite:
    return CalendarWrite(
        tenant=r["tenant"],
        hold_id=r["hold_id"],
        attendee=r["attendee"],
        uid=r["uid"],
        action=r["action"],
        status=r["status"],
        start=from_us(r["start_us"]),
        end=from_us(r["end_us"]),
        summary=r["summary"],
        description=r["description"],
        version=r["version"],
        state=r["state"],
        attempts=r["attempts"],
        next_attempt_at=from_us(r["next_attempt_us"]),
        updated_at=from_us(r["updated_us"]),
        claim_owner=r["claim_owner"],
        claim_until=opt_from_us(r["claim_until_us"]),
        written_at=opt_from_us(r["written_us"]),
        last_error=r["last_error"],
    )


def _write_values(w: CalendarWrite) -> dict[str, Any]:
    return {
        "tenant": w.tenant,
        "hold_id": w.hold_id,
        "attendee": w.attendee,
        "uid": w.uid,
        "action": w.action,
        "status": w.status,
        "start_us": to_us(w.start),
        "end_us": to_us(w.end),
        "summary": w.summary,
        "description": w.description,
        "version": w.version,
        "state": w.state,
        "attempts": w.attempts,
        "next_attempt_us": to_us(w.next_attempt_at),
        "updated_us": to_us(w.updated_at),
        "claim_owner": w.claim_owner,
        "claim_until_us": opt_to_us(w.claim_until),
        "written_us": opt_to_us(w.written_at),
        "last_error": w.last_error,
    }


def _where(key: tuple[str, str, str]) -> dict[str, str]:
    return {"w_tenant": key[0], "w_hold_id": key[1], "w_attendee": key[2]}


def _key(write: CalendarWrite) -> tuple[str, str, str]:
    return write.key


def _newest(writes: Sequence[CalendarWrite]) -> list[CalendarWrite]:
    """The write each key would end with, enqueued one by one: the first of its
    highest version. (One upsert must not touch a row twice on PostgreSQL.)"""
    newest: dict[tuple[str, str, str], CalendarWrite] = {}
    for w in writes:
        known = newest.get(w.key)
        if known is None or w.version > known.version:
            newest[w.key] = w
    return list(newest.values())


class SqlCalendarWrites:
    def __init__(self, db: Runner) -> None:
        self._db = db
        self._enqueue = _ENQUEUE[db.conn.dialect.name]

    def enqueue(self, writes: Sequence[CalendarWrite]) -> None:
        if writes:
            self._db.put(self._enqueue, [_write_values(w) for w in _newest(writes)])

    def claim(self, owner: str, now: datetime, until: datetime, limit: int) -> list[CalendarWrite]:
        rows = self._db.rows(_WRITES_DUE, {"now": to_us(now), "limit": limit})
        claimed = [replace(write_from_row(r), claim_owner=owner, claim_until=until) for r in rows]
        claims = [_where(w.key) | {"v_owner": owner, "v_until": to_us(until)} for w in claimed]
        if claims:
            self._db.put(_WRITE_CLAIM, claims)
        return claimed

    def get_many(self, keys: Collection[tuple[str, str, str]]) -> list[CalendarWrite]:
        wanted = set(keys)
        found: list[CalendarWrite] = []
        for tenant in sorted({k[0] for k in wanted}):
            mine = [k for k in wanted if k[0] == tenant]
            params = {
                "tenant": tenant,
                "holds": sorted({k[1] for k in mine}),
                "attendees": sorted({k[2] for k in mine}),
            }
            rows = self._db.rows(_WRITES_OF, params)
            found.extend(w for w in map(write_from_row, rows) if w.key in wanted)
        return sorted(found, key=_key)

    def save_many(self, writes: Sequence[CalendarWrite]) -> None:
        saved = []
        for w in writes:
            values = _write_values(w)
            row = _where(w.key) | {"w_version": w.version}
            saved.append(row | {f"v_{k}": values[k] for k in _WRITE_MUTABLE})
        if saved:
            self._db.put(_WRITE_SAVE, saved)

    def counts(self, tenant: str, attendee: str) -> dict[str, int]:
        rows = self._db.rows(_WRITE_COUNTS, {"tenant": tenant, "attendee": attendee})
        return {r["state"]: int(r["n"]) for r in rows}

    def remove_for_attendee(self, tenant: str, attendee: str) -> int:
        return self._db.write(_WRITES_REMOVE, {"tenant": tenant, "attendee": attendee})

    def revive(self, tenant: str, attendee: str, now: datetime) -> int:
        params = {"w_tenant": tenant, "w_attendee": attendee, "v_now": to_us(now)}
        return self._db.write(_WRITES_REVIVE, params)

    def purge_written(self, before: datetime, limit: int) -> int:
        rows = self._db.rows(_WRITTEN, {"before": to_us(before), "limit": limit})
        keys = [(r["tenant"], r["hold_id"], r["attendee"]) for r in rows]
        if keys:
            self._db.put(_WRITE_REMOVE, [_where(k) for k in keys])
        return len(keys)
