"""Operational records: the retry-storm watch per workflow, and whole-store gauges."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

import orjson
from sqlalchemy import (
    Insert,
    bindparam,
    case,
    delete,
    func,
    insert,
    literal_column,
    null,
    or_,
    select,
    true,
    update,
)
from sqlalchemy.dialects import postgresql, sqlite

from slotward.adapters.store import tables as t
from slotward.adapters.store.instants import opt_from_us, opt_to_us, to_us
from slotward.adapters.store.runner import Row, Runner
from slotward.engine.model import Gauges, HoldStatus, WorkflowStats

__all__ = ["SqlStats", "SqlWorkflows"]

_w = t.workflow_stats.c
_r = t.workflow_replays.c
_h = t.holds.c
_WHERE = (_w.tenant == bindparam("w_tenant"), _w.workflow_id == bindparam("w_workflow"))
_GET = select(t.workflow_stats).where(*_WHERE)

# SQLite: the names as one JSON array (json_each), not an IN list of a
# parameter each: a flush reads back every workflow replayed since the last,
# each of which bound in Python was most of the statement's time.
_NAMES = func.json_each(bindparam("w_workflows")).table_valued("value")
_GET_MANY = {
    dialect: select(t.workflow_stats).where(
        _w.tenant == bindparam("w_tenant"),
        _w.workflow_id.in_(
            select(_NAMES.c.value)
            if dialect == "sqlite"
            else bindparam("w_workflows", expanding=True)
        ),
        or_(_w.replays >= bindparam("w_read_back"), _w.storm_us.is_not(None)),
    )  # the primary key (tenant, workflow_id)
    for dialect in ("sqlite", "postgresql")
}
_CHUNK = 500  # workflows read back a statement: well within every driver's parameter limit
_ADD = insert(t.workflow_stats)
# The dashboard's: a tenant's workflows (the primary key's prefix) sorted here.
# No index on replays: every flush of replays would rewrite it.
_BUSIEST = (
    select(t.workflow_stats)
    .where(_w.tenant == bindparam("w_tenant"))
    .order_by(_w.replays.desc(), _w.workflow_id)
    .limit(bindparam("limit"))
)
_MOVE = (
    update(t.workflow_stats)
    .where(*_WHERE)
    .values(
        replays=bindparam("v_replays"),
        last_replay_us=bindparam("v_last_replay_us"),
        storm_us=bindparam("v_storm_us"),
        storms=bindparam("v_storms"),
    )
)


# SQLite: a hand-over's rows as one JSON array of arrays, read by json_each, in
# one statement. An executemany steps once a row, and each step gives up the
# GIL: on the writer thread, with the event loop's thread busy answering, a
# hand-over of thousands of workflows was thousands of hand-overs of the GIL,
# each some microseconds of both threads' CPU.
_ROWS = func.json_each(bindparam("rows")).table_valued("value")


def _item(i: int) -> Any:
    return func.json_extract(_ROWS.c.value, literal_column(f"'$[{i}]'"))


def _add_replays(dialect: Any) -> Insert:
    """The workflow's row with the replays added (made if missing)."""
    # The constants as SQL, not parameters: the rows are then bound as given,
    # without a copy of each with the constants added (runner.py, plans.py).
    if dialect is sqlite:  # the rows [workflow, count, last_us] in one array
        stmt = dialect.insert(t.workflow_stats).from_select(
            ["tenant", "workflow_id", "replays", "last_replay_us", "storm_us", "storms"],
            select(bindparam("tenant"), _item(0), _item(1), _item(2), null(),
                   literal_column("0")).select_from(_ROWS).where(true()),
        )  # fmt: skip
    else:
        stmt = dialect.insert(t.workflow_stats).values(
            tenant=bindparam("tenant"), workflow_id=bindparam("workflow_id"),
            replays=bindparam("count"), last_replay_us=bindparam("last_us"), storm_us=null(),
            storms=literal_column("0"),
        )  # fmt: skip
    new = stmt.excluded
    later = case(
        (_w.last_replay_us.is_(None) | (_w.last_replay_us < new.last_replay_us),
         new.last_replay_us),
        else_=_w.last_replay_us,
    )  # fmt: skip
    return stmt.on_conflict_do_update(  # type: ignore[no-any-return]
        index_elements=[_w.tenant, _w.workflow_id],
        set_={"replays": _w.replays + new.replays, "last_replay_us": later},
    )


def _add_seconds(dialect: Any) -> Insert:
    """Replays of one second added to the stored count (made if missing)."""
    stmt = dialect.insert(t.workflow_replays)
    if dialect is sqlite:  # the rows [workflow, second_us, count] in one array
        stmt = stmt.from_select(
            ["tenant", "workflow_id", "second_us", "count"],
            select(bindparam("tenant"), _item(0), _item(1), _item(2))
            .select_from(_ROWS)
            .where(true()),  # an INSERT ... SELECT before ON CONFLICT needs a WHERE
        )
    return stmt.on_conflict_do_update(  # type: ignore[no-any-return]
        index_elements=[_r.tenant, _r.workflow_id, _r.second_us],
        set_={"count": _r["count"] + stmt.excluded["count"]},
    )


_ADD_REPLAYS = {"sqlite": _add_replays(sqlite), "postgresql": _add_replays(postgresql)}
_ADD_SECONDS = {"sqlite": _add_seconds(sqlite), "postgresql": _add_seconds(postgresql)}
_R_WORKFLOW = (_r.tenant == bindparam("w_tenant"), _r.workflow_id == bindparam("w_workflow"))
_R_SUM = select(func.coalesce(func.sum(_r["count"]), 0)).where(
    *_R_WORKFLOW, _r.second_us >= bindparam("w_since_us")
)
_R_OLD_TENANT = select(_r.tenant).where(_r.second_us < bindparam("w_before_us")).limit(1)
_R_FORGET = delete(t.workflow_replays).where(
    _r.tenant == bindparam("w_tenant"), _r.second_us < bindparam("w_before_us")
)
_BY_STATUS = select(_h.status, func.count().label("n")).group_by(_h.status)
_OVERDUE = select(func.count().label("n"), func.min(_h.expires_us).label("oldest")).where(
    _h.status == HoldStatus.HELD.value, _h.expires_us <= bindparam("now")
)
_o = t.outbox.c
_BACKLOG = select(func.count().label("n"), func.min(_o.created_us).label("oldest")).where(
    _o.state == "pending"
)  # ix_outbox_state_created
_DEAD = select(func.count()).select_from(t.outbox).where(_o.state == "dead")
_FAILING = select(t.webhooks.c.id, t.webhooks.c.consecutive_failures).where(
    t.webhooks.c.consecutive_failures > 0
)
# Leases in flight: an abandoned lease past its expiry is not (ix_ledger_lease).
_EXECUTING = (
    select(func.count())
    .select_from(t.ledger)
    .where(t.ledger.c.lease_expires_us > bindparam("now"), t.ledger.c.state == "executing")
)


def _json(rows: Any) -> str:
    return orjson.dumps(rows).decode()


def _stats(row: Row) -> WorkflowStats:
    return WorkflowStats(
        tenant=row["tenant"],
        workflow_id=row["workflow_id"],
        replays=row["replays"],
        last_replay_at=opt_from_us(row["last_replay_us"]),
        storm_at=opt_from_us(row["storm_us"]),
        storms=row["storms"],
    )


class SqlWorkflows:
    def __init__(self, db: Runner) -> None:
        self._db = db
        self._add_replays = _ADD_REPLAYS[db.conn.dialect.name]
        self._add_seconds = _ADD_SECONDS[db.conn.dialect.name]
        self._get_many = _GET_MANY[db.conn.dialect.name]
        # SQLite: lists of names and rows go as one JSON array (json_each).
        self._as_json = db.conn.dialect.name == "sqlite"

    def get(self, tenant: str, workflow_id: str) -> WorkflowStats | None:
        row = self._db.first(_GET, {"w_tenant": tenant, "w_workflow": workflow_id})
        return None if row is None else _stats(row)

    def _put(self, old: WorkflowStats | None, new: WorkflowStats) -> None:
        values = {
            "v_replays": new.replays,
            "v_last_replay_us": opt_to_us(new.last_replay_at),
            "v_storm_us": opt_to_us(new.storm_at),
            "v_storms": new.storms,
        }
        if old is None:
            row = {k.removeprefix("v_"): v for k, v in values.items()}
            self._db.write(_ADD, {"tenant": new.tenant, "workflow_id": new.workflow_id, **row})
        else:
            where = {"w_tenant": new.tenant, "w_workflow": new.workflow_id}
            self._db.write(_MOVE, {**where, **values})

    def add_replays(
        self, tenant: str, counts: Mapping[str, tuple[int, datetime]], *, read_back: int = 0
    ) -> dict[str, WorkflowStats]:
        # The upserts in one statement (SQLite: _ROWS) or one executemany, then
        # the rows read back in chunks: a flush hands over every workflow
        # replayed since the last, and a benchmark's replays are each of another
        # one (two statements, not one per workflow). Only the rows asked for
        # come back: most workflows are far from a storm, and nothing of theirs
        # is wanted.
        if not counts:
            return {}
        rows = [(name, count, to_us(last_at)) for name, (count, last_at) in sorted(counts.items())]
        if self._as_json:  # one statement (_ROWS)
            self._db.write(self._add_replays, {"tenant": tenant, "rows": _json(rows)})
        else:
            self._db.write(self._add_replays, [
                {"tenant": tenant, "workflow_id": w, "count": n, "last_us": us} for w, n, us in rows
            ])  # fmt: skip
        names = [name for name, _, _ in rows]
        added: dict[str, WorkflowStats] = {}
        for start in range(0, len(names), _CHUNK):
            some: Any = names[start : start + _CHUNK]
            if self._as_json:
                some = _json(some)
            chunk = {"w_tenant": tenant, "w_workflows": some, "w_read_back": read_back}
            added.update(
                (r["workflow_id"], _stats(r)) for r in self._db.rows(self._get_many, chunk)
            )
        return added

    def mark_storm(self, tenant: str, workflow_id: str, at: datetime) -> None:
        old = self.get(tenant, workflow_id)
        if old is None:
            new = WorkflowStats(tenant, workflow_id, 0, None, at, 1)
        else:
            new = WorkflowStats(
                tenant, workflow_id, old.replays, old.last_replay_at, at, old.storms + 1
            )
        self._put(old, new)

    def add_replay_seconds(
        self, tenant: str, buckets: Mapping[str, Mapping[datetime, int]]
    ) -> None:
        # In (workflow, second) order, as every process writes them. A hand-over
        # has few seconds and many workflows, most replayed in one second: each
        # second is made microseconds once, a workflow's seconds sorted if several.
        micros: dict[datetime, int] = {}
        rows: list[tuple[str, int, int]] = []
        for workflow_id, by_second in sorted(buckets.items()):
            items = by_second.items() if len(by_second) < 2 else sorted(by_second.items())
            for second, count in items:
                us = micros.get(second)
                if us is None:
                    us = micros[second] = to_us(second)
                rows.append((workflow_id, us, count))
        if not rows:
            return
        if self._as_json:  # one statement (_ROWS)
            self._db.write(self._add_seconds, {"tenant": tenant, "rows": _json(rows)})
        else:
            self._db.write(self._add_seconds, [
                {"tenant": tenant, "workflow_id": w, "second_us": us, "count": n}
                for w, us, n in rows
            ])  # fmt: skip

    def replays_since(self, tenant: str, workflow_id: str, since: datetime) -> int:
        where = {"w_tenant": tenant, "w_workflow": workflow_id, "w_since_us": to_us(since)}
        return int(self._db.scalars(_R_SUM, where)[0])

    def forget_replays_before(self, tenant: str, before: datetime) -> None:
        self._db.write(_R_FORGET, {"w_tenant": tenant, "w_before_us": to_us(before)})

    def tenant_with_replays_before(self, before: datetime) -> str | None:
        row = self._db.first(_R_OLD_TENANT, {"w_before_us": to_us(before)})
        return None if row is None else str(row["tenant"])

    def busiest(self, tenant: str, limit: int) -> list[WorkflowStats]:
        rows = self._db.rows(_BUSIEST, {"w_tenant": tenant, "limit": limit})
        return [_stats(r) for r in rows]


class SqlStats:
    def __init__(self, db: Runner) -> None:
        self._db = db

    def gauges(self, now: datetime) -> Gauges:
        by_status = {str(r["status"]): int(r["n"]) for r in self._db.rows(_BY_STATUS)}
        late = self._db.rows(_OVERDUE, {"now": to_us(now)})[0]
        overdue, oldest = late["n"], late["oldest"]
        if overdue:  # held past expiry reads as expired, swept or not
            by_status[HoldStatus.HELD.value] -= int(overdue)
            if not by_status[HoldStatus.HELD.value]:  # a status not seen has no count
                del by_status[HoldStatus.HELD.value]
            expired = HoldStatus.EXPIRED.value
            by_status[expired] = by_status.get(expired, 0) + int(overdue)
        backlog = self._db.rows(_BACKLOG)[0]
        failing = self._db.rows(_FAILING)
        return Gauges(
            holds_by_status=by_status,
            outbox_backlog=int(backlog["n"]),
            oldest_overdue=opt_from_us(oldest),
            executing=int(self._db.scalars(_EXECUTING, {"now": to_us(now)})[0]),
            oldest_pending_event=opt_from_us(backlog["oldest"]),
            dead_events=int(self._db.scalars(_DEAD)[0]),
            failing_subscriptions={str(r["id"]): int(r["consecutive_failures"]) for r in failing},
        )
