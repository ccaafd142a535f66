"""Approvals, approval policies and dashboard sessions over one synchronous Core connection.

An approval's evidence and action are compact JSON text, read back as
``json.loads`` makes them. ASCII escapes keep any string storable (a lone
surrogate, which UTF-8 cannot encode, is sent as ``\\ud800``), and text, not
jsonb, keeps an object's keys in the order they came. A pending approval past
its expiry reads expired, swept or not, as a held hold past its expiry does
(``_status_clause``).
"""

from __future__ import annotations

import json
from collections.abc import Collection
from datetime import datetime
from typing import Any

from sqlalchemy import Insert, and_, bindparam, delete, false, insert, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite

from slotward.adapters.store import tables as t
from slotward.adapters.store.instants import from_us, opt_from_us, opt_to_us, to_us
from slotward.adapters.store.runner import Row, Runner
from slotward.engine.approvals import Approval, ApprovalRules, ApprovalStatus, Session

__all__ = ["SqlApprovals", "SqlSessions", "approval_from_row"]

_PENDING = ApprovalStatus.PENDING.value
_a = t.approvals.c
_ADD = insert(t.approvals)
_GET = select(t.approvals).where(_a.id == bindparam("id"), _a.tenant == bindparam("tenant"))
_FOR_HOLD = select(t.approvals).where(
    _a.tenant == bindparam("tenant"), _a.hold_id == bindparam("hold_id")
)  # ux_approvals_tenant_hold
_MUTABLE = ("status", "decided_by", "decided_us", "note", "updated_us")
_SAVE = (
    update(t.approvals)
    .where(_a.id == bindparam("w_id"), _a.tenant == bindparam("w_tenant"))
    .values({name: bindparam(f"v_{name}") for name in _MUTABLE})
)
_DUE = (
    select(t.approvals)
    .where(_a.status == _PENDING, _a.expires_us <= bindparam("now"))
    .order_by(_a.expires_us, _a.id)  # the oldest overdue first, ties by id, as the fakes
    .limit(bindparam("limit"))
)
# By primary key: their status and expiry are judged in ``settled``, not here,
# where SQLite might prefer the status index and walk every pending approval.
_STATES_OF = select(_a.id, _a.status, _a.expires_us).where(
    _a.tenant == bindparam("tenant"), _a.id.in_(bindparam("ids", expanding=True))
)
_p = t.approval_policies.c
_RULES = select(t.approval_policies).where(_p.tenant == bindparam("tenant"))


def _put_rules(dialect: Any) -> Insert:
    """The tenant's policy inserted, or replaced when it has one."""
    stmt = dialect.insert(t.approval_policies)
    new = stmt.excluded
    return stmt.on_conflict_do_update(  # type: ignore[no-any-return]
        index_elements=[_p.tenant],
        set_={"rules": new.rules, "updated_us": new.updated_us, "updated_by": new.updated_by},
    )


_PUT_RULES = {"sqlite": _put_rules(sqlite), "postgresql": _put_rules(postgresql)}


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"))


def approval_from_row(r: Row) -> Approval:
    action = r["action"]
    return Approval(
        id=r["id"],
        tenant=r["tenant"],
        key=r["key"],
        workflow_id=r["workflow_id"],
        requested_by=r["requested_by"],
        summary=r["summary"],
        evidence=json.loads(r["evidence"]),
        action=None if action is None else json.loads(action),
        status=ApprovalStatus(r["status"]),
        created_at=from_us(r["created_us"]),
        updated_at=from_us(r["updated_us"]),
        expires_at=from_us(r["expires_us"]),
        audit_seq=r["audit_seq"],
        hold_id=r["hold_id"],
        hold_expires_at=opt_from_us(r["hold_expires_us"]),
        decided_by=r["decided_by"],
        decided_at=opt_from_us(r["decided_us"]),
        note=r["note"],
    )


def _values(a: Approval) -> dict[str, Any]:
    return {
        "id": a.id,
        "tenant": a.tenant,
        "key": a.key,
        "workflow_id": a.workflow_id,
        "requested_by": a.requested_by,
        "summary": a.summary,
        "evidence": _json(a.evidence),
        "action": None if a.action is None else _json(a.action),
        "hold_id": a.hold_id,
        "status": a.status.value,
        "created_us": to_us(a.created_at),
        "updated_us": to_us(a.updated_at),
        "expires_us": to_us(a.expires_at),
        "audit_seq": a.audit_seq,
        "hold_expires_us": opt_to_us(a.hold_expires_at),
        "decided_by": a.decided_by,
        "decided_us": opt_to_us(a.decided_at),
        "note": a.note,
    }


def _rules_text(rules: ApprovalRules) -> str:
    domains = rules.outside_domains
    return _json(
        {
            "attendees_more_than": rules.attendees_more_than,
            "longer_than_minutes": rules.longer_than_minutes,
            "priority_at_least": rules.priority_at_least,
            "outside_domains": None if domains is None else list(domains),
        }
    )


def _rules(text: str) -> ApprovalRules:
    stored = json.loads(text)
    domains = stored.get("outside_domains")
    return ApprovalRules(
        attendees_more_than=stored.get("attendees_more_than"),
        longer_than_minutes=stored.get("longer_than_minutes"),
        priority_at_least=stored.get("priority_at_least"),
        outside_domains=None if domains is None else tuple(domains),
    )


class SqlApprovals:
    def __init__(self, db: Runner) -> None:
        self._db = db
        self._put_rules = _PUT_RULES[db.conn.dialect.name]

    def add(self, approval: Approval) -> None:
        # Sent now, not put aside: a second approval of the hold is refused
        # here (ux_approvals_tenant_hold), by the call that made it.
        self._db.write(_ADD, _values(approval))

    def get(self, tenant: str, approval_id: str) -> Approval | None:
        row = self._db.first(_GET, {"id": approval_id, "tenant": tenant})
        return None if row is None else approval_from_row(row)

    def for_hold(self, tenant: str, hold_id: str) -> Approval | None:
        row = self._db.first(_FOR_HOLD, {"tenant": tenant, "hold_id": hold_id})
        return None if row is None else approval_from_row(row)

    def save(self, approval: Approval) -> None:
        values = _values(approval)
        where = {"w_id": approval.id, "w_tenant": approval.tenant}
        self._db.put(_SAVE, {**where, **{f"v_{k}": values[k] for k in _MUTABLE}})

    def search(
        self,
        tenant: str,
        *,
        statuses: Collection[ApprovalStatus] | None,
        after_id: str | None,
        limit: int,
        now: datetime,
    ) -> list[Approval]:
        q = select(t.approvals).where(_a.tenant == tenant).order_by(_a.id).limit(limit)
        if after_id is not None:
            q = q.where(_a.id > after_id)
        if statuses is not None:
            q = q.where(_status_clause(statuses, to_us(now)))
        return [approval_from_row(r) for r in self._db.dynamic(q)]

    def due_for_expiry(self, now: datetime, limit: int) -> list[Approval]:
        rows = self._db.rows(_DUE, {"now": to_us(now), "limit": limit})
        return [approval_from_row(r) for r in rows]

    def settled(self, tenant: str, approval_ids: Collection[str], now: datetime) -> list[str]:
        if not approval_ids:
            return []
        now_us = to_us(now)
        rows = self._db.rows(_STATES_OF, {"tenant": tenant, "ids": sorted(set(approval_ids))})
        pending = {r["id"] for r in rows if r["status"] == _PENDING and r["expires_us"] > now_us}
        return [i for i in approval_ids if i not in pending]

    def rules(self, tenant: str) -> tuple[ApprovalRules, datetime, str] | None:
        row = self._db.first(_RULES, {"tenant": tenant})
        if row is None:
            return None
        return _rules(row["rules"]), from_us(row["updated_us"]), row["updated_by"]

    def put_rules(self, tenant: str, rules: ApprovalRules, now: datetime, by: str) -> None:
        # Sent now: two upserts of one row as parts of one statement (runner.put
        # on PostgreSQL) would be refused.
        row = {"tenant": tenant, "rules": _rules_text(rules), "updated_us": to_us(now),
               "updated_by": by}  # fmt: skip
        self._db.write(self._put_rules, row)


def _status_clause(statuses: Collection[ApprovalStatus], now_us: int) -> Any:
    """Match statuses as readers see them: a pending approval past expiry is expired."""
    parts = []
    for status in statuses:
        if status is ApprovalStatus.PENDING:
            parts.append(and_(_a.status == _PENDING, _a.expires_us > now_us))
        elif status is ApprovalStatus.EXPIRED:
            overdue = and_(_a.status == _PENDING, _a.expires_us <= now_us)
            parts.append(or_(_a.status == ApprovalStatus.EXPIRED.value, overdue))
        else:
            parts.append(_a.status == status.value)
    return or_(false(), *parts)  # no status asked for: nothing matches


_s = t.sessions.c
_S_ADD = insert(t.sessions)
_S_GET = select(t.sessions).where(_s.token_hash == bindparam("token_hash"))
_S_REMOVE = delete(t.sessions).where(_s.token_hash == bindparam("token_hash"))
_S_EXPIRED = (
    select(_s.token_hash)
    .where(_s.expires_us <= bindparam("now"))
    .order_by(_s.expires_us, _s.token_hash)  # ix_sessions_expires
    .limit(bindparam("limit"))
)
_S_PURGE = delete(t.sessions).where(_s.token_hash.in_(_S_EXPIRED.scalar_subquery()))


def _session(r: Row) -> Session:
    return Session(
        token_hash=r["token_hash"],
        key_id=r["key_id"],
        tenant=r["tenant"],
        created_at=from_us(r["created_us"]),
        expires_at=from_us(r["expires_us"]),
    )


class SqlSessions:
    def __init__(self, db: Runner) -> None:
        self._db = db

    def add(self, session: Session) -> None:
        row = {
            "token_hash": session.token_hash,
            "key_id": session.key_id,
            "tenant": session.tenant,
            "created_us": to_us(session.created_at),
            "expires_us": to_us(session.expires_at),
        }
        self._db.put(_S_ADD, row)

    def get(self, token_hash: str) -> Session | None:
        row = self._db.first(_S_GET, {"token_hash": token_hash})
        return None if row is None else _session(row)

    def remove(self, token_hash: str) -> bool:
        return self._db.write(_S_REMOVE, {"token_hash": token_hash}) == 1

    def purge(self, now: datetime, limit: int) -> int:
        return self._db.write(_S_PURGE, {"now": to_us(now), "limit": limit})
