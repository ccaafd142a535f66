"""Calendar bindings and their mirror over one synchronous SQLAlchemy Core connection.

A sync worker's claim of the bindings due a read is one ``SELECT ... FOR
UPDATE SKIP LOCKED`` (nothing is rendered on SQLite, whose one writer runs
them one at a time): workers side by side on PostgreSQL claim disjoint
batches. A read stores its sync state by compare-and-set on the binding's
version. The calendar writes are in calendar_write_repos.py.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from sqlalchemy import Insert, bindparam, delete, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.sql.elements import BindParameter

from slotward.adapters.store import tables as t
from slotward.adapters.store.instants import from_us, opt_from_us, opt_to_us, to_us
from slotward.adapters.store.runner import Row, Runner
from slotward.engine.calendars import BusyBlock, CalendarBinding

__all__ = ["SqlCalendars", "SqlMirror", "binding_from_row"]

_b = t.calendar_bindings.c
_m = t.calendar_busy.c
_NOW: BindParameter[Any] = bindparam("now")

# -- bindings ------------------------------------------------------------------

_SYNC_STATE = (
    "status", "synced_us", "covers_from_us", "covers_until_us", "cursor", "version", "error",
    "error_us", "failures", "next_sync_us", "sync_owner", "sync_until_us",
)  # fmt: skip


def _put_binding(dialect: Any) -> Insert:
    """Insert the binding, or overwrite every column of the attendee's."""
    stmt = dialect.insert(t.calendar_bindings)
    kept = {c.name: stmt.excluded[c.name] for c in t.calendar_bindings.c if not c.primary_key}
    return stmt.on_conflict_do_update(  # type: ignore[no-any-return]
        index_elements=[_b.tenant, _b.attendee], set_=kept
    )


_BINDING_PUT = {"sqlite": _put_binding(sqlite), "postgresql": _put_binding(postgresql)}
_BINDING_GET = select(t.calendar_bindings).where(
    _b.tenant == bindparam("tenant"), _b.attendee == bindparam("attendee")
)
_BINDINGS_OF = (
    select(t.calendar_bindings)
    .where(
        _b.tenant == bindparam("tenant"),
        _b.attendee.in_(bindparam("attendees", expanding=True)),
    )
    .order_by(_b.attendee)
)
_BINDING_REMOVE = delete(t.calendar_bindings).where(
    _b.tenant == bindparam("tenant"), _b.attendee == bindparam("attendee")
)
_STORE_SYNC = (
    update(t.calendar_bindings)
    .where(
        _b.tenant == bindparam("w_tenant"),
        _b.attendee == bindparam("w_attendee"),
        _b.version == bindparam("w_version"),
        # The same binding, not a re-PUT's (which starts afresh, version and all).
        _b.updated_us == bindparam("w_updated"),
    )
    .values({name: bindparam(f"v_{name}") for name in _SYNC_STATE})
)
# Never read (no next read planned) first: NULLS FIRST, as both databases
# agree to (PostgreSQL puts NULLs last in an ascending order by default).
_SYNC_DUE = (
    select(t.calendar_bindings)
    .where(
        or_(_b.next_sync_us.is_(None), _b.next_sync_us <= _NOW),
        or_(_b.sync_until_us.is_(None), _b.sync_until_us <= _NOW),
    )
    .order_by(_b.next_sync_us.nulls_first(), _b.tenant, _b.attendee)
    .limit(bindparam("limit"))
    .with_for_update(skip_locked=True)
)
_SYNC_CLAIM = (
    update(t.calendar_bindings)
    .where(_b.tenant == bindparam("w_tenant"), _b.attendee == bindparam("w_attendee"))
    .values(sync_owner=bindparam("v_owner"), sync_until_us=bindparam("v_until"))
)


def binding_from_row(r: Row) -> CalendarBinding:
    return CalendarBinding(
        tenant=r["tenant"],
        attendee=r["attendee"],
        provider=r["provider"],
        url=r["url"],
        username=r["username"],
        password=r["password"],
        timezone=r["timezone"],
        on_unavailable=r["on_unavailable"],
        created_at=from_us(r["created_us"]),
        updated_at=from_us(r["updated_us"]),
        status=r["status"],
        synced_at=opt_from_us(r["synced_us"]),
        covers_from=opt_from_us(r["covers_from_us"]),
        covers_until=opt_from_us(r["covers_until_us"]),
        cursor=r["cursor"],
        version=r["version"],
        error=r["error"],
        error_at=opt_from_us(r["error_us"]),
        failures=r["failures"],
        next_sync_at=opt_from_us(r["next_sync_us"]),
        sync_owner=r["sync_owner"],
        sync_until=opt_from_us(r["sync_until_us"]),
    )


def _binding_values(b: CalendarBinding) -> dict[str, Any]:
    return {
        "tenant": b.tenant,
        "attendee": b.attendee,
        "provider": b.provider,
        "url": b.url,
        "username": b.username,
        "password": b.password,
        "timezone": b.timezone,
        "on_unavailable": b.on_unavailable,
        "created_us": to_us(b.created_at),
        "updated_us": to_us(b.updated_at),
        "status": b.status,
        "synced_us": opt_to_us(b.synced_at),
        "covers_from_us": opt_to_us(b.covers_from),
        "covers_until_us": opt_to_us(b.covers_until),
        "cursor": b.cursor,
        "version": b.version,
        "error": b.error,
        "error_us": opt_to_us(b.error_at),
        "failures": b.failures,
        "next_sync_us": opt_to_us(b.next_sync_at),
        "sync_owner": b.sync_owner,
        "sync_until_us": opt_to_us(b.sync_until),
    }


class SqlCalendars:
    def __init__(self, db: Runner) -> None:
        self._db = db
        self._put = _BINDING_PUT[db.conn.dialect.name]

    def put(self, binding: CalendarBinding) -> None:
        self._db.put(self._put, _binding_values(binding))
        whose = {"tenant": binding.tenant, "attendee": binding.attendee}
        self._db.put(_MIRROR_CLEAR, whose)  # the old calendar's busy time is not the new one's

    def get(self, tenant: str, attendee: str) -> CalendarBinding | None:
        row = self._db.first(_BINDING_GET, {"tenant": tenant, "attendee": attendee})
        return None if row is None else binding_from_row(row)

    def for_attendees(self, tenant: str, attendees: Collection[str]) -> list[CalendarBinding]:
        if not attendees:
            return []
        rows = self._db.rows(_BINDINGS_OF, {"tenant": tenant, "attendees": sorted(set(attendees))})
        return [binding_from_row(r) for r in rows]

    def remove(self, tenant: str, attendee: str) -> bool:
        whose = {"tenant": tenant, "attendee": attendee}
        self._db.put(_MIRROR_CLEAR, whose)
        return self._db.write(_BINDING_REMOVE, whose) == 1

    def store_sync(self, binding: CalendarBinding, expected_version: int) -> bool:
        values = _binding_values(binding)
        params = {
            "w_tenant": binding.tenant,
            "w_attendee": binding.attendee,
            "w_version": expected_version,
            "w_updated": values["updated_us"],
            **{f"v_{name}": values[name] for name in _SYNC_STATE},
        }
        return self._db.write(_STORE_SYNC, params) == 1

    def claim_due(
        self, owner: str, now: datetime, until: datetime, limit: int
    ) -> list[CalendarBinding]:
        rows = self._db.rows(_SYNC_DUE, {"now": to_us(now), "limit": limit})
        claimed = [replace(binding_from_row(r), sync_owner=owner, sync_until=until) for r in rows]
        claims = [
            {"w_tenant": b.tenant, "w_attendee": b.attendee, "v_owner": owner}
            | {"v_until": to_us(until)}
            for b in claimed
        ]
        if claims:
            self._db.put(_SYNC_CLAIM, claims)
        return claimed


# -- the mirror ----------------------------------------------------------------

_MIRROR_CLEAR = delete(t.calendar_busy).where(
    _m.tenant == bindparam("tenant"), _m.attendee == bindparam("attendee")
)
_MIRROR_DROP_SOURCES = delete(t.calendar_busy).where(
    _m.tenant == bindparam("tenant"),
    _m.attendee == bindparam("attendee"),
    _m.source.in_(bindparam("sources", expanding=True)),
)
# The id is the database's: named columns, so none is bound.
_MIRROR_ADD = t.calendar_busy.insert().values(
    tenant=bindparam("tenant"),
    attendee=bindparam("attendee"),
    source=bindparam("source"),
    start_us=bindparam("start_us"),
    end_us=bindparam("end_us"),
)
# A block may begin before the window: the index bounds the scan by tenant,
# attendee and start below the window's end; the end is checked on its rows.
_OVERLAPPING = (
    select(_m.tenant, _m.attendee, _m.source, _m.start_us, _m.end_us)
    .where(
        _m.tenant == bindparam("tenant"),
        _m.attendee.in_(bindparam("attendees", expanding=True)),
        _m.start_us < bindparam("end"),
        _m.end_us > bindparam("start"),
    )
    .order_by(_m.start_us, _m.attendee, _m.source, _m.end_us)
)


def _block_rows(
    tenant: str, attendee: str, blocks: Sequence[BusyBlock], source: str | None = None
) -> list[dict[str, Any]]:
    return [
        {
            "tenant": tenant,
            "attendee": attendee,
            "source": b.source if source is None else source,
            "start_us": to_us(b.start),
            "end_us": to_us(b.end),
        }
        for b in blocks
    ]


class SqlMirror:
    def __init__(self, db: Runner) -> None:
        self._db = db

    def replace(self, tenant: str, attendee: str, blocks: Sequence[BusyBlock]) -> None:
        self._db.put(_MIRROR_CLEAR, {"tenant": tenant, "attendee": attendee})
        if blocks:
            self._db.put(_MIRROR_ADD, _block_rows(tenant, attendee, blocks))

    def patch(
        self,
        tenant: str,
        attendee: str,
        changed: Mapping[str, Sequence[BusyBlock]],
        removed: Collection[str],
    ) -> None:
        gone = sorted(set(changed) | set(removed))
        if not gone:
            return
        self._db.put(
            _MIRROR_DROP_SOURCES, {"tenant": tenant, "attendee": attendee, "sources": gone}
        )
        rows = [
            row
            for source, blocks in changed.items()  # a block is its source's, whatever it says
            for row in _block_rows(tenant, attendee, blocks, source)
        ]
        if rows:
            self._db.put(_MIRROR_ADD, rows)

    def overlapping(
        self, tenant: str, attendees: Collection[str], start: datetime, end: datetime
    ) -> list[BusyBlock]:
        if not attendees:
            return []
        params = {
            "tenant": tenant,
            "attendees": sorted(set(attendees)),
            "start": to_us(start),
            "end": to_us(end),
        }
        return [
            BusyBlock(
                r["tenant"],
                r["attendee"],
                r["source"],
                from_us(r["start_us"]),
                from_us(r["end_us"]),
            )
            for r in self._db.rows(_OVERLAPPING, params)
        ]
