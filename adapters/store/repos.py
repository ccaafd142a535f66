"""The engine's repositories over one synchronous SQLAlchemy Core connection."""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import Any

from sqlalchemy import Connection, and_, exists, insert, or_, select, update
from sqlalchemy.engine import Row

from slotward.adapters.store import tables as t
from slotward.engine.audit import GENESIS
from slotward.engine.model import (
    AuditEntry,
    Hold,
    HoldStatus,
    LedgerRecord,
    OutboxEvent,
    Principal,
)

__all__ = ["SqlUnitOfWork", "from_us", "to_us"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ACTIVE = (HoldStatus.HELD.value, HoldStatus.COMMITTED.value)


def to_us(instant: datetime) -> int:
    return (instant - _EPOCH) // timedelta(microseconds=1)


def from_us(micros: int) -> datetime:
    return _EPOCH + timedelta(microseconds=micros)


def _opt_us(micros: int | None) -> datetime | None:
    return None if micros is None else from_us(micros)


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
        committed_at=_opt_us(m["committed_us"]),
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
        q = (
            select(t.holds)
            .where(t.holds.c.id.in_(overlapping), _blocking_clause(to_us(now)))
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


class SqlLedger:
    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    def get(self, tenant: str, key: str) -> LedgerRecord | None:
        q = select(t.ledger).where(t.ledger.c.tenant == tenant, t.ledger.c.key == key)
        row = self._conn.execute(q).first()
        if row is None:
            return None
        m = row._mapping
        return LedgerRecord(
            tenant=m["tenant"],
            key=m["key"],
            fingerprint=m["fingerprint"],
            state=m["state"],
            status_code=m["status_code"],
            body=bytes(m["body"]),
            created_at=from_us(m["created_us"]),
            expires_at=from_us(m["expires_us"]),
            hold_id=m["hold_id"],
        )

    def add(self, record: LedgerRecord) -> None:
        self._conn.execute(
            insert(t.ledger).values(
                tenant=record.tenant,
                key=record.key,
                fingerprint=record.fingerprint,
                state=record.state,
                status_code=record.status_code,
                body=record.body,
                hold_id=record.hold_id,
                created_us=to_us(record.created_at),
                expires_us=to_us(record.expires_at),
            )
        )


class SqlDirectory:
    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    def lookup(
        self, tenant: str, emails: Collection[str], ids: Collection[str]
    ) -> tuple[dict[str, str], set[str]]:
        found: dict[str, str] = {}
        known: set[str] = set()
        if emails:
            e = t.attendee_emails
            q = select(e.c.email, e.c.attendee_id).where(
                e.c.tenant == tenant, e.c.email.in_(list(emails))
            )
            found = {r.email: r.attendee_id for r in self._conn.execute(q)}
        if ids:
            a = t.attendees
            q2 = select(a.c.id).where(a.c.tenant == tenant, a.c.id.in_(list(ids)))
            known = {r.id for r in self._conn.execute(q2)}
        return found, known

    def register(self, tenant: str, pairs: Sequence[tuple[str, str]], now: datetime) -> None:
        for attendee_id, email in pairs:
            self._insert_missing(tenant, attendee_id, None, now)
            self._point(tenant, email, attendee_id, overwrite=False)

    def put(
        self, tenant: str, attendee_id: str, name: str | None, emails: Sequence[str], now: datetime
    ) -> None:
        if not self._insert_missing(tenant, attendee_id, name, now):
            a = t.attendees
            self._conn.execute(
                update(a).where(a.c.tenant == tenant, a.c.id == attendee_id).values(name=name)
            )
        for email in emails:
            self._point(tenant, email, attendee_id, overwrite=True)

    def _insert_missing(
        self, tenant: str, attendee_id: str, name: str | None, now: datetime
    ) -> bool:
        a = t.attendees
        q = select(a.c.id).where(a.c.tenant == tenant, a.c.id == attendee_id)
        if self._conn.execute(q).first() is not None:
            return False
        self._conn.execute(
            insert(a).values(tenant=tenant, id=attendee_id, name=name, created_us=to_us(now))
        )
        return True

    def _point(self, tenant: str, email: str, attendee_id: str, *, overwrite: bool) -> None:
        e = t.attendee_emails
        where = (e.c.tenant == tenant, e.c.email == email)
        if self._conn.execute(select(e.c.email).where(*where)).first() is None:
            self._conn.execute(
                insert(e).values(tenant=tenant, email=email, attendee_id=attendee_id)
            )
        elif overwrite:
            self._conn.execute(update(e).where(*where).values(attendee_id=attendee_id))


class SqlAudit:
    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    def head(self, tenant: str) -> tuple[int, str]:
        q = select(t.audit_heads.c.seq, t.audit_heads.c.hash).where(
            t.audit_heads.c.tenant == tenant
        )
        row = self._conn.execute(q).first()
        return (0, GENESIS) if row is None else (row.seq, row.hash)

    def append(self, entry: AuditEntry) -> None:
        self._conn.execute(
            insert(t.audit_log).values(
                tenant=entry.tenant,
                seq=entry.seq,
                at_us=to_us(entry.at),
                actor=entry.actor,
                action=entry.action,
                key=entry.key,
                hold_id=entry.hold_id,
                outcome=entry.outcome,
                prev_hash=entry.prev_hash,
                hash=entry.hash,
            )
        )
        heads = t.audit_heads
        if entry.seq == 1:
            self._conn.execute(insert(heads).values(tenant=entry.tenant, seq=1, hash=entry.hash))
        else:
            self._conn.execute(
                update(heads)
                .where(heads.c.tenant == entry.tenant)
                .values(seq=entry.seq, hash=entry.hash)
            )

    def entries(self, tenant: str, after_seq: int, limit: int) -> list[AuditEntry]:
        a = t.audit_log
        q = (
            select(a)
            .where(a.c.tenant == tenant, a.c.seq > after_seq)
            .order_by(a.c.seq)
            .limit(limit)
        )
        return [
            AuditEntry(
                tenant=r.tenant,
                seq=r.seq,
                at=from_us(r.at_us),
                actor=r.actor,
                action=r.action,
                key=r.key,
                hold_id=r.hold_id,
                outcome=r.outcome,
                prev_hash=r.prev_hash,
                hash=r.hash,
            )
            for r in self._conn.execute(q)
        ]


class SqlOutbox:
    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    def add(self, event: OutboxEvent) -> None:
        created = to_us(event.created_at)
        self._conn.execute(
            insert(t.outbox).values(
                id=event.id,
                tenant=event.tenant,
                type=event.type,
                hold_id=event.hold_id,
                payload=json.dumps(event.payload, separators=(",", ":")),
                state="pending",
                attempts=0,
                created_us=created,
                next_attempt_us=created,
            )
        )


class SqlKeys:
    def __init__(self, conn: Connection) -> None:
        self._conn = conn

    def find(self, key_hash: str) -> Principal | None:
        k = t.api_keys
        q = select(k).where(k.c.key_hash == key_hash, k.c.revoked_us.is_(None))
        row = self._conn.execute(q).first()
        if row is None:
            return None
        return Principal(row.tenant, row.agent_id, row.role, row.priority)

    def add(self, key_id: str, key_hash: str, principal: Principal, now: datetime) -> None:
        self._conn.execute(
            insert(t.api_keys).values(
                id=key_id,
                key_hash=key_hash,
                tenant=principal.tenant,
                agent_id=principal.agent_id,
                role=principal.role,
                priority=principal.priority,
                created_us=to_us(now),
            )
        )


class SqlUnitOfWork:
    """One transaction on ``conn``; ``begin`` is the SQL that opens it."""

    def __init__(self, conn: Connection, max_hold: timedelta, *, begin: str = "BEGIN") -> None:
        self._conn = conn
        self._begin = begin
        self.holds = SqlHolds(conn, max_hold)
        self.ledger = SqlLedger(conn)
        self.directory = SqlDirectory(conn)
        self.audit = SqlAudit(conn)
        self.outbox = SqlOutbox(conn)
        self.keys = SqlKeys(conn)

    def __enter__(self) -> SqlUnitOfWork:
        self._conn.exec_driver_sql(self._begin)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._conn.in_transaction():
            self._conn.rollback()

    def commit(self) -> None:
        self._conn.commit()
