"""The engine's repositories over one synchronous SQLAlchemy Core connection."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime, timedelta
from types import TracebackType
from typing import Any

from sqlalchemy import Connection, Insert, bindparam, insert, select, update
from sqlalchemy.dialects import postgresql, sqlite

from slotward.adapters.store import tables as t
from slotward.adapters.store.approval_repos import SqlApprovals, SqlSessions
from slotward.adapters.store.audit_repo import HEAD_MOVE, SqlAudit, audit_from_row, head_moved
from slotward.adapters.store.calendar_repos import SqlCalendars, SqlMirror
from slotward.adapters.store.calendar_write_repos import SqlCalendarWrites
from slotward.adapters.store.delivery_repos import SqlDeliveries
from slotward.adapters.store.hold_repo import SqlHolds
from slotward.adapters.store.instants import to_us
from slotward.adapters.store.ledger_repo import SqlLedger
from slotward.adapters.store.ops_repos import SqlStats, SqlWorkflows
from slotward.adapters.store.outbox_repo import SqlOutbox
from slotward.adapters.store.postgres.locks import TransactionLocks
from slotward.adapters.store.runner import Row, Runner, runner_for
from slotward.adapters.store.webhook_repos import SqlLeases, SqlWebhooks
from slotward.engine.approvals import DirectoryEntry
from slotward.engine.model import Principal

# The audit chains are adapters/store/audit_repo.py's, re-exported here.
__all__ = ["HEAD_MOVE", "SqlAudit", "SqlUnitOfWork", "audit_from_row", "head_moved"]

_EMAILS = select(t.attendee_emails.c.email, t.attendee_emails.c.attendee_id).where(
    t.attendee_emails.c.tenant == bindparam("tenant"),
    t.attendee_emails.c.email.in_(bindparam("emails", expanding=True)),
)
_IDS = select(t.attendees.c.id).where(
    t.attendees.c.tenant == bindparam("tenant"),
    t.attendees.c.id.in_(bindparam("ids", expanding=True)),
)
_KEY_REVOKE = (
    update(t.api_keys)
    .where(t.api_keys.c.id == bindparam("w_id"), t.api_keys.c.revoked_us.is_(None))
    .values(revoked_us=bindparam("v_revoked_us"))
)
_KEY_FIND = select(t.api_keys).where(
    t.api_keys.c.key_hash == bindparam("key_hash"), t.api_keys.c.revoked_us.is_(None)
)
_KEY_BY_ID = select(t.api_keys).where(
    t.api_keys.c.id == bindparam("key_id"), t.api_keys.c.revoked_us.is_(None)
)
_KEY_ADD = insert(t.api_keys)
_KEY_REHASH = (
    update(t.api_keys)
    .where(
        t.api_keys.c.id == bindparam("w_id"),
        t.api_keys.c.key_hash == bindparam("w_old"),
        t.api_keys.c.revoked_us.is_(None),
    )
    .values(key_hash=bindparam("v_new"))
)
_a = t.attendees.c
_e = t.attendee_emails.c
_ATTENDEE = select(_a.id).where(_a.tenant == bindparam("tenant"), _a.id == bindparam("id"))
_ATTENDEE_ADD = insert(t.attendees)
_ATTENDEE_NAME = (
    update(t.attendees)
    .where(_a.tenant == bindparam("w_tenant"), _a.id == bindparam("w_id"))
    .values(name=bindparam("v_name"))
)
_EMAIL = select(_e.email).where(_e.tenant == bindparam("tenant"), _e.email == bindparam("email"))
_EMAIL_ADD = insert(t.attendee_emails)


def _insert_new(dialect: Any, table: Any) -> Insert:
    """An insert that keeps the row already there (one statement, not a read and a write)."""
    return dialect.insert(table).on_conflict_do_nothing()  # type: ignore[no-any-return]


_ATTENDEE_NEW = {d.dialect.name: _insert_new(d, t.attendees) for d in (sqlite, postgresql)}
_EMAIL_NEW = {d.dialect.name: _insert_new(d, t.attendee_emails) for d in (sqlite, postgresql)}
_EMAIL_MOVE = (
    update(t.attendee_emails)
    .where(_e.tenant == bindparam("w_tenant"), _e.email == bindparam("w_email"))
    .values(attendee_id=bindparam("v_attendee_id"))
)
_ENTRIES = (
    select(_a.id, _a.name)
    .where(_a.tenant == bindparam("tenant"), _a.id.in_(bindparam("ids", expanding=True)))
    .order_by(_a.id)
)
_EMAILS_OF = select(_e.attendee_id, _e.email).where(
    _e.tenant == bindparam("tenant"), _e.attendee_id.in_(bindparam("ids", expanding=True))
)  # ix_attendee_emails_tenant_attendee


class SqlDirectory:
    def __init__(self, db: Runner) -> None:
        self._db = db
        dialect = db.conn.dialect.name
        self._attendee_new = _ATTENDEE_NEW[dialect]
        self._email_new = _EMAIL_NEW[dialect]

    def lookup(
        self, tenant: str, emails: Collection[str], ids: Collection[str]
    ) -> tuple[dict[str, str], set[str]]:
        found: dict[str, str] = {}
        known: set[str] = set()
        if emails:
            rows = self._db.rows(_EMAILS, {"tenant": tenant, "emails": list(emails)})
            found = {r["email"]: r["attendee_id"] for r in rows}
        if ids:
            known = set(self._db.scalars(_IDS, {"tenant": tenant, "ids": list(ids)}))
        return found, known

    def register(self, tenant: str, pairs: Sequence[tuple[str, str]], now: datetime) -> None:
        # A create's new attendees: two inserts that keep what is there, not a
        # read and a write for each attendee and each email (four statements).
        if not pairs:
            return
        created = to_us(now)
        self._db.put(
            self._attendee_new,
            [{"tenant": tenant, "id": a, "name": None, "created_us": created} for a, _ in pairs],
        )
        self._db.put(
            self._email_new, [{"tenant": tenant, "email": e, "attendee_id": a} for a, e in pairs]
        )

    def put(
        self, tenant: str, attendee_id: str, name: str | None, emails: Sequence[str], now: datetime
    ) -> None:
        if not self._insert_missing(tenant, attendee_id, name, now):
            renamed = {"w_tenant": tenant, "w_id": attendee_id, "v_name": name}
            self._db.write(_ATTENDEE_NAME, renamed)
        for email in emails:
            self._point(tenant, email, attendee_id, overwrite=True)

    def entries(self, tenant: str, ids: Collection[str]) -> list[DirectoryEntry]:
        if not ids:
            return []
        params = {"tenant": tenant, "ids": sorted(set(ids))}
        emails: dict[str, list[str]] = {}
        for r in self._db.rows(_EMAILS_OF, params):
            emails.setdefault(r["attendee_id"], []).append(r["email"])
        return [
            DirectoryEntry(r["id"], r["name"], tuple(sorted(emails.get(r["id"], ()))))
            for r in self._db.rows(_ENTRIES, params)
        ]

    def _insert_missing(
        self, tenant: str, attendee_id: str, name: str | None, now: datetime
    ) -> bool:
        if self._db.first(_ATTENDEE, {"tenant": tenant, "id": attendee_id}) is not None:
            return False
        row = {"tenant": tenant, "id": attendee_id, "name": name, "created_us": to_us(now)}
        self._db.write(_ATTENDEE_ADD, row)
        return True

    def _point(self, tenant: str, email: str, attendee_id: str, *, overwrite: bool) -> None:
        if self._db.first(_EMAIL, {"tenant": tenant, "email": email}) is None:
            row = {"tenant": tenant, "email": email, "attendee_id": attendee_id}
            self._db.write(_EMAIL_ADD, row)
        elif overwrite:
            moved = {"w_tenant": tenant, "w_email": email, "v_attendee_id": attendee_id}
            self._db.write(_EMAIL_MOVE, moved)


def _principal(row: Row) -> Principal:
    return Principal(row["tenant"], row["agent_id"], row["role"], row["priority"])


class SqlKeys:
    def __init__(self, db: Runner) -> None:
        self._db = db

    def find(self, key_hash: str) -> Principal | None:
        row = self._db.first(_KEY_FIND, {"key_hash": key_hash})
        return None if row is None else _principal(row)

    def by_id(self, key_id: str) -> tuple[str, Principal] | None:
        row = self._db.first(_KEY_BY_ID, {"key_id": key_id})
        return None if row is None else (row["key_hash"], _principal(row))

    def add(self, key_id: str, key_hash: str, principal: Principal, now: datetime) -> None:
        self._db.write(
            _KEY_ADD,
            {
                "id": key_id,
                "key_hash": key_hash,
                "tenant": principal.tenant,
                "agent_id": principal.agent_id,
                "role": principal.role,
                "priority": principal.priority,
                "created_us": to_us(now),
            },
        )

    def rehash(self, key_id: str, old_hash: str, new_hash: str) -> bool:
        return (
            self._db.write(_KEY_REHASH, {"w_id": key_id, "w_old": old_hash, "v_new": new_hash}) == 1
        )

    def revoke(self, key_id: str, now: datetime) -> bool:
        return self._db.write(_KEY_REVOKE, {"w_id": key_id, "v_revoked_us": to_us(now)}) == 1


class SqlUnitOfWork:
    """One transaction on ``conn``; ``begin`` is the SQL that opens it, if any.

    On PostgreSQL a writer (``writes``) takes the locks of
    adapters/store/postgres/locks.py; ``wanted`` carries the attendee locks an
    attempt found it needed over to the next (the store runs it again). ``db``:
    the statements' runner on ``conn`` (by default its own).
    """

    def __init__(
        self,
        conn: Connection,
        max_hold: timedelta,
        *,
        begin: str | None = "BEGIN",
        writes: bool = True,
        wanted: set[str] | None = None,
        db: Runner | None = None,
    ) -> None:
        self._conn = conn
        self._begin = begin
        self._db = db = runner_for(conn) if db is None else db
        on_postgres = conn.dialect.name == "postgresql"
        self._locks = TransactionLocks(db, wanted if wanted is not None else set())
        self._locking = on_postgres and writes
        self.holds = SqlHolds(db, max_hold)
        self.audit = SqlAudit(db, lock_head=self._locking)
        # A PostgreSQL writer's claim lookup also locks and reads the audit head.
        self.ledger = SqlLedger(db, max_hold, self.audit if self._locking else None)
        self.directory = SqlDirectory(db)
        self.outbox = SqlOutbox(db)
        self.deliveries = SqlDeliveries(db)
        self.webhooks = SqlWebhooks(db)
        self.leases = SqlLeases(db)
        self.calendars = SqlCalendars(db)
        self.mirror = SqlMirror(db)
        self.calendar_writes = SqlCalendarWrites(db)
        self.keys = SqlKeys(db)
        self.workflows = SqlWorkflows(db)
        self.stats = SqlStats(db)
        self.approvals = SqlApprovals(db)
        self.sessions = SqlSessions(db)

    def __enter__(self) -> SqlUnitOfWork:
        self.holds.forget()
        self.audit.forget()
        if self._begin is not None:
            self._conn.exec_driver_sql(self._begin)
        elif not self._conn.in_transaction():
            # SQLAlchemy begins it (at the engine's isolation level): statements
            # run on the driver's cursor (runner.py) would not make it autobegin,
            # and its commit would then commit nothing.
            self._conn.begin()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.holds.forget()
        self.audit.forget()
        if self._conn.in_transaction():
            self._conn.rollback()

    def lock_tenant(self, tenant: str) -> None:
        # SQLite writers already hold the database lock (BEGIN IMMEDIATE). On
        # PostgreSQL the tenant's advisory lock, exclusive, orders this write
        # with all the tenant's others; a hash collision only makes two
        # tenants share it.
        if self._locking:
            self._locks.tenant(tenant)

    def lock_attendees(
        self, tenant: str, attendees: Collection[str], key: str | None = None
    ) -> None:
        # SQLite: as lock_tenant. PostgreSQL: the tenant's lock shared, then
        # the attendees' (and the key's) in order (adapters/store/postgres/locks.py).
        if self._locking:
            self._locks.attendees(tenant, attendees, key)

    def lock_part(self, tenants: Collection[str], part: str) -> None:
        # SQLite: as lock_tenant. PostgreSQL: each tenant's lock shared, then
        # its ``part`` lock, tenant by tenant in order (postgres/locks.py).
        if self._locking:
            self._locks.part(tenants, part)

    def commit(self) -> None:
        self.holds.forget()  # what follows is another transaction's
        self.audit.forget()
        self._db.flush()  # the writes put aside (PostgreSQL) go with the transaction
        self._conn.commit()
