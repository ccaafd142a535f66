"""The idempotency ledger over one synchronous SQLAlchemy Core connection."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime, timedelta
from typing import Any

import orjson
from sqlalchemy import (
    Select,
    and_,
    bindparam,
    delete,
    exists,
    false,
    func,
    insert,
    literal_column,
    null,
    or_,
    select,
    text,
    union_all,
    update,
)

from slotward.adapters.store import tables as t
from slotward.adapters.store.audit_repo import SqlAudit
from slotward.adapters.store.hold_repo import (
    LIVE_INTENT_ID,
    OVERLAPPING_IDS,
    hold_from_row,
    lookback_us,
    overlap_params,
)
from slotward.adapters.store.instants import from_us, opt_from_us, opt_to_us, to_us
from slotward.adapters.store.runner import Row, Runner
from slotward.engine.model import HoldStatus, LedgerRecord
from slotward.engine.ports import ClaimLookup, ReplayState

__all__ = ["SqlLedger", "record_from_row"]

_l = t.ledger.c
# Built once (see hold_repo.py for why): the hot path only binds parameters.
_GET = select(t.ledger).where(_l.tenant == bindparam("tenant"), _l.key == bindparam("key"))
# A fingerprint's records: the one stored under it as its key (the primary key
# finds it), and those stored under a client's key, the only ones its index
# keeps (migration 0010: a create without a client key writes no entry there).
_BY_FINGERPRINT_OF = union_all(
    select(t.ledger).where(
        _l.tenant == bindparam("tenant"),
        _l.key == bindparam("fingerprint"),
        _l.fingerprint == bindparam("fingerprint"),
    ),
    select(t.ledger).where(
        _l.tenant == bindparam("tenant"),
        _l.fingerprint == bindparam("fingerprint"),
        text(t.LEDGER_UNDER_CLIENT_KEY),  # as the index's condition is written
    ),
).subquery()
_BY_FINGERPRINT = (
    select(_BY_FINGERPRINT_OF)
    # ties by key: the same first record on every store
    .order_by(_BY_FINGERPRINT_OF.c.created_us, _BY_FINGERPRINT_OF.c.key)
    .limit(1)
)
_ADD = insert(t.ledger)
# Bind names must differ from column names in an UPDATE's SET.
_SAVE = (
    update(t.ledger)
    .where(_l.tenant == bindparam("w_tenant"), _l.key == bindparam("w_key"))
    .values(
        state=bindparam("v_state"),
        created=bindparam("v_created"),
        body=bindparam("v_body"),
        agent_id=bindparam("v_agent_id"),
        lease_token=bindparam("v_lease_token"),
        lease_expires_us=bindparam("v_lease_expires_us"),
        expires_us=bindparam("v_expires_us"),
        completed_us=bindparam("v_completed_us"),
    )
)
_REMOVE = delete(t.ledger).where(_l.tenant == bindparam("tenant"), _l.key == bindparam("key"))
_FOR_WORKFLOW = (
    select(t.ledger)
    .where(
        _l.tenant == bindparam("tenant"),
        _l.workflow_id == bindparam("workflow_id"),
        text(t.LEDGER_EXECUTION),  # as its index's condition is written (migration 0010)
    )
    .order_by(_l.created_us, _l.key)
    .limit(bindparam("limit"))
)
# Past retention, and not an execution whose lease is still running.
_DUE = and_(
    _l.expires_us <= bindparam("now"),
    or_(_l.lease_expires_us.is_(None), _l.lease_expires_us <= bindparam("now")),
)
_PURGEABLE = select(_l.tenant).where(_DUE).limit(1)
_PURGE_KEYS = select(_l.key).where(_l.tenant == bindparam("tenant"), _DUE).limit(bindparam("limit"))
_PURGE = delete(t.ledger).where(
    _l.tenant == bindparam("tenant"), _l.key.in_(bindparam("keys", expanding=True))
)


def _replay_state(aggregate: Any | None) -> Select[Any]:
    """What a replay answers with of a record (not all of it), its hold's status and
    expiry, and a JSON object of the directory's entries for some emails (the
    aggregate of SQLite's, or of PostgreSQL's; without one, no emails are asked
    about: an expanding parameter cannot be empty)."""
    _h, _e = t.holds.c, t.attendee_emails.c
    directory = (
        null()
        if aggregate is None
        else select(aggregate(_e.email, _e.attendee_id))
        .where(_e.tenant == bindparam("tenant"), _e.email.in_(bindparam("emails", expanding=True)))
        .scalar_subquery()
    )  # the primary key (tenant, email)
    joined = t.ledger.outerjoin(t.holds, and_(_h.id == _l.hold_id, _h.tenant == _l.tenant))
    return (
        select(_l.key, _l.fingerprint, _l.created, _l.body, _l.hold_id,
               _h.status.label("hold_status"), _h.expires_us.label("hold_expires_us"),
               directory.label("directory"))
        .select_from(joined)
        .where(_l.tenant == bindparam("tenant"), _l.key == bindparam("key"))
    )  # fmt: skip  # the primary keys: the ledger's, then the holds' (id)


# What a create reads before it decides, in one statement: the record under its
# key and the live hold of its intent, each an outer join on a row of one
# (either, both or neither found), their columns told apart by a prefix,
# whether any attendee has a calendar bound (most have none: no read of them)
# and whether the tenant has an active webhook subscription.
_ONE = select(literal_column("1").label("one")).subquery("one")
_held = t.holds.alias("held")
_b = t.calendar_bindings.c
_BOUND = exists().where(
    _b.tenant == bindparam("tenant"), _b.attendee.in_(bindparam("attendees", expanding=True))
)  # the bindings' primary key (tenant, attendee)


_w = t.webhooks.c
_SUBSCRIBED = exists().where(
    _w.status == "active", _w.tenant == bindparam("tenant")
)  # the index (status, tenant)


# A PostgreSQL writer's audit head, locked (FOR UPDATE) as it is read: "seq,hash".
_ah = t.audit_heads.c
_HEAD_LOCKED = (
    select(func.concat(_ah.seq, literal_column("','"), _ah.hash))
    .where(_ah.tenant == bindparam("tenant"))
    .with_for_update()
    .scalar_subquery()
)


def _claim_lookup(bound: Any, overlapping: Any, head: Any) -> Select[Any]:
    return select(
        *(c.label(f"l_{c.name}") for c in t.ledger.c),
        *(c.label(f"h_{c.name}") for c in _held.c),
        bound.label("bound"),
        _SUBSCRIBED.label("subscribed"),
        overlapping.label("overlapping"),
        head.label("audit_head"),
    ).select_from(
        _ONE.outerjoin(t.ledger, and_(_l.tenant == bindparam("tenant"), _l.key == bindparam("key")))
        .outerjoin(_held, and_(_held.c.tenant == bindparam("tenant"), _held.c.id == LIVE_INTENT_ID))
    )  # fmt: skip  # the ledger's primary key; the holds' by the intent's index, then by id


# By whether attendees are asked about (an expanding parameter cannot be empty),
# then whether their holds overlapping a span are (by dialect), and whether the
# audit head is locked and read too (a PostgreSQL writer's).
_CLAIM_LOOKUP: dict[tuple[bool, bool, str, bool], Select[Any]] = {
    (False, False, "", False): _claim_lookup(false(), null(), null()),
    (True, False, "", False): _claim_lookup(_BOUND, null(), null()),
    **{
        (True, True, dialect, False): _claim_lookup(_BOUND, ids, null())
        for dialect, ids in OVERLAPPING_IDS.items()
    },
    (True, True, "postgresql", True): _claim_lookup(
        _BOUND, OVERLAPPING_IDS["postgresql"], _HEAD_LOCKED
    ),
}


class _Prefixed:
    """The columns of one table in a row of several, read by their own names."""

    __slots__ = ("_prefix", "_row")

    def __init__(self, row: Row, prefix: str) -> None:
        self._row, self._prefix = row, prefix

    def __getitem__(self, name: str) -> Any:
        return self._row[self._prefix + name]


_STATUSES = {s.value: s for s in HoldStatus}  # a dict's lookup, not the enum's call

# By dialect, then by whether emails are asked about.
_REPLAY_STATE = {
    "sqlite": (_replay_state(None), _replay_state(func.json_group_object)),
    "postgresql": (_replay_state(None), _replay_state(func.json_object_agg)),
}


def record_from_row(m: Row) -> LedgerRecord:
    return LedgerRecord(
        tenant=m["tenant"],
        key=m["key"],
        fingerprint=m["fingerprint"],
        state=m["state"],
        created=bool(m["created"]),
        body=bytes(m["body"]),
        created_at=from_us(m["created_us"]),
        expires_at=from_us(m["expires_us"]),
        hold_id=m["hold_id"],
        kind=m["kind"],
        workflow_id=m["workflow_id"],
        tool=m["tool"],
        agent_id=m["agent_id"],
        lease_token=m["lease_token"],
        lease_expires_at=opt_from_us(m["lease_expires_us"]),
        completed_at=opt_from_us(m["completed_us"]),
    )


class SqlLedger:
    """``audit``: a PostgreSQL writer's chains, whose head a claim's lookup locks and
    reads in its own statement (one round trip less a create), after the
    attendees' locks, as the audit's first append would (postgres/locks.py)."""

    def __init__(self, db: Runner, max_hold: timedelta, audit: SqlAudit | None = None) -> None:
        self._db = db
        self._lookback = lookback_us(max_hold)
        self._dialect = db.conn.dialect.name
        self._audit = audit

    def get(self, tenant: str, key: str) -> LedgerRecord | None:
        row = self._db.first(_GET, {"tenant": tenant, "key": key})
        return None if row is None else record_from_row(row)

    def replay_state(self, tenant: str, key: str, emails: Collection[str]) -> ReplayState | None:
        # The three reads of a replay's lookup in one statement and one round trip.
        if emails:
            params = {"tenant": tenant, "key": key, "emails": list(emails)}
            row = self._db.first(_REPLAY_STATE[self._dialect][1], params)
        else:
            row = self._db.first(_REPLAY_STATE[self._dialect][0], {"tenant": tenant, "key": key})
        if row is None:
            return None
        # Text on SQLite ("{}" for no row); on PostgreSQL decoded already, or NULL.
        # Emails to ids, strings only: orjson reads them as json does, for less.
        directory = row["directory"]
        if isinstance(directory, str):
            directory = orjson.loads(directory)
        status = row["hold_status"]
        return ReplayState(
            key=row["key"],
            fingerprint=row["fingerprint"],
            created=bool(row["created"]),
            body=bytes(row["body"]),
            hold_id=row["hold_id"],
            hold_status=None if status is None else _STATUSES[status],
            hold_expires_at=None if status is None else from_us(row["hold_expires_us"]),
            directory=directory or {},
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
        params: dict[str, Any] = {"tenant": tenant, "key": key, "workflow_id": workflow_id,
                                  "intent_fp": intent_fp, "now": to_us(now)}  # fmt: skip
        if attendees:
            params["attendees"] = sorted(attendees)
        audit, shape = None, (bool(attendees), False, "", False)
        if span is not None and attendees:  # a write's: the span and (PostgreSQL) the head
            params.update(overlap_params(*span, self._lookback))
            audit = self._audit
            shape = (True, True, self._dialect, audit is not None)
        row = self._db.first(_CLAIM_LOOKUP[shape], params)
        assert row is not None  # the row of one is always there
        if audit is not None and row["audit_head"] is not None:  # none: the first append's
            seq, _, hash_ = row["audit_head"].partition(",")
            audit.locked(tenant, int(seq), hash_)
        overlapping = None
        if span is not None:  # asked: () for none (a hold has attendees: none without)
            ids = row["overlapping"]
            overlapping = tuple(ids.split(",")) if ids else ()
        return ClaimLookup(
            record=None if row["l_key"] is None else record_from_row(_Prefixed(row, "l_")),
            live=None if row["h_id"] is None else hold_from_row(_Prefixed(row, "h_")),
            calendars_bound=bool(row["bound"]),
            subscribed=bool(row["subscribed"]),
            overlapping=overlapping,
        )

    def find_by_fingerprint(self, tenant: str, fingerprint: str) -> LedgerRecord | None:
        params = {"tenant": tenant, "fingerprint": fingerprint}
        row = self._db.first(_BY_FINGERPRINT, params)
        return None if row is None else record_from_row(row)

    def add(self, record: LedgerRecord) -> None:
        self._db.put(
            _ADD,
            {
                "tenant": record.tenant,
                "key": record.key,
                "fingerprint": record.fingerprint,
                "state": record.state,
                "created": record.created,
                "body": record.body,
                "hold_id": record.hold_id,
                "created_us": to_us(record.created_at),
                "expires_us": to_us(record.expires_at),
                "kind": record.kind,
                "workflow_id": record.workflow_id,
                "tool": record.tool,
                "agent_id": record.agent_id,
                "lease_token": record.lease_token,
                "lease_expires_us": opt_to_us(record.lease_expires_at),
                "completed_us": opt_to_us(record.completed_at),
            },
        )

    def save(self, record: LedgerRecord) -> None:
        self._db.put(
            _SAVE,
            {
                "w_tenant": record.tenant,
                "w_key": record.key,
                "v_state": record.state,
                "v_created": record.created,
                "v_body": record.body,
                "v_agent_id": record.agent_id,
                "v_lease_token": record.lease_token,
                "v_lease_expires_us": opt_to_us(record.lease_expires_at),
                "v_expires_us": to_us(record.expires_at),
                "v_completed_us": opt_to_us(record.completed_at),
            },
        )

    def remove(self, tenant: str, key: str) -> None:
        self._db.write(_REMOVE, {"tenant": tenant, "key": key})

    def for_workflow(self, tenant: str, workflow_id: str, limit: int) -> list[LedgerRecord]:
        params = {"tenant": tenant, "workflow_id": workflow_id, "limit": limit}
        return [record_from_row(row) for row in self._db.rows(_FOR_WORKFLOW, params)]

    def purgeable_tenant(self, now: datetime) -> str | None:
        row = self._db.first(_PURGEABLE, {"now": to_us(now)})
        return None if row is None else str(row["tenant"])

    def purge(self, tenant: str, now: datetime, limit: int) -> int:
        params = {"tenant": tenant, "now": to_us(now), "limit": limit}
        keys = self._db.scalars(_PURGE_KEYS, params)
        if keys:
            self._db.write(_PURGE, {"tenant": tenant, "keys": keys})
        return len(keys)
