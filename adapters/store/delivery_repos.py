"""Deliveries and their attempt log over one synchronous SQLAlchemy Core connection.

A claim is one ``SELECT ... FOR UPDATE OF deliveries SKIP LOCKED`` (nothing is
rendered on SQLite, where one relay runs at a time): relays side by side on
PostgreSQL claim disjoint batches, and a claim of a transaction that never
committed was never made. Only the deliveries' rows are locked, not their
subscription's or event's, so two relays still share one subscription's work.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Any

from sqlalchemy import and_, bindparam, delete, exists, func, insert, or_, select, update
from sqlalchemy.sql.elements import BindParameter

from slotward.adapters.store import tables as t
from slotward.adapters.store.instants import from_us, opt_from_us, opt_to_us, to_us
from slotward.adapters.store.outbox_repo import event_from_row
from slotward.adapters.store.runner import Row, Runner
from slotward.adapters.store.webhook_repos import subscription_from_row
from slotward.engine.model import Attempt, Claim, Delivery

__all__ = ["SqlDeliveries", "delivery_from_row"]

_d = t.deliveries.c
_a = t.delivery_attempts.c
_w = t.webhooks.c
_NOW: BindParameter[Any] = bindparam("now")
_IDS: BindParameter[Any] = bindparam("ids", expanding=True)

_earlier = t.deliveries.alias("earlier")
_unfanned = t.outbox.alias("unfanned")
# Per hold and subscription one event in flight: none whose hold has an
# earlier event still pending to the same subscription, or not yet fanned out
# (NULLs compare as unknown: an event of no hold waits for nothing).
_IN_ORDER = and_(
    ~exists().where(
        _earlier.c.subscription_id == _d.subscription_id,
        _earlier.c.hold_id == _d.hold_id,
        _earlier.c.seq < _d.seq,
        _earlier.c.state == "pending",
    ),
    ~exists().where(
        _unfanned.c.hold_id == _d.hold_id,
        _unfanned.c.seq < _d.seq,
        _unfanned.c.fanned.is_(False),
    ),
)
_CLAIMABLE = (
    select(t.deliveries)
    .join(t.webhooks, and_(_w.id == _d.subscription_id, _w.status == "active"))
    .join(t.outbox, t.outbox.c.id == _d.event_id)
    .where(
        _d.state == "pending",
        _d.next_attempt_us <= _NOW,
        or_(_d.claim_until_us.is_(None), _d.claim_until_us <= _NOW),
        _IN_ORDER,
    )
    .order_by(_d.next_attempt_us, _d.id)
    .limit(bindparam("limit"))
    .with_for_update(skip_locked=True, of=t.deliveries)
)
_CLAIM = (
    update(t.deliveries)
    .where(_d.id.in_(_IDS))
    .values(claim_owner=bindparam("v_owner"), claim_until_us=bindparam("v_until"))
)
_EVENTS = select(t.outbox).where(t.outbox.c.id.in_(_IDS))
_SUBSCRIPTIONS = select(t.webhooks).where(_w.id.in_(_IDS))
_ADD = insert(t.deliveries)
_GET = select(t.deliveries).where(_d.id == bindparam("id"))
_MUTABLE = (
    "state", "attempts", "next_attempt_us", "claim_owner", "claim_until_us", "delivered_us",
    "last_status", "last_error",
)  # fmt: skip
_SAVE = (
    update(t.deliveries)
    .where(_d.id == bindparam("w_id"))
    .values({name: bindparam(f"v_{name}") for name in _MUTABLE})
)
_LAST_N = select(func.coalesce(func.max(_a.n), 0)).where(_a.delivery_id == bindparam("id"))
_ADD_ATTEMPT = insert(t.delivery_attempts)
_GET_MANY = select(t.deliveries).where(_d.id.in_(_IDS)).order_by(_d.id)
# Numbered one past the delivery's last in the statement itself: many at once.
_ADD_NUMBERED = insert(t.delivery_attempts).from_select(
    ["delivery_id", "n", "at_us", "status", "error"],
    select(
        bindparam("delivery_id", type_=t.delivery_attempts.c.delivery_id.type),
        func.coalesce(func.max(_a.n), 0) + 1,
        bindparam("at_us", type_=t.delivery_attempts.c.at_us.type),
        bindparam("status", type_=t.delivery_attempts.c.status.type),
        bindparam("error", type_=t.delivery_attempts.c.error.type),
    ).where(_a.delivery_id == bindparam("delivery_id")),
)
_ATTEMPTS = select(t.delivery_attempts).where(_a.delivery_id == bindparam("id")).order_by(_a.n)
_FOR_EVENT = (
    select(t.deliveries).where(_d.event_id == bindparam("event_id")).order_by(_d.subscription_id)
)
_OF_SUBSCRIPTION = (
    select(_d.id, _d.event_id)
    .where(_d.subscription_id == bindparam("subscription_id"))
    .order_by(_d.event_id)
)
_PENDING_OF_SUBSCRIPTION = _OF_SUBSCRIPTION.where(_d.state == "pending")
_KILL = (
    update(t.deliveries)
    .where(_d.id.in_(_IDS), _d.state == "pending")
    .values(state="dead", last_error=bindparam("v_reason"), claim_owner=None, claim_until_us=None)
)
_REMOVE_ATTEMPTS = delete(t.delivery_attempts).where(_a.delivery_id.in_(_IDS))
_REMOVE = delete(t.deliveries).where(_d.id.in_(_IDS))
_REDRIVE = (
    update(t.deliveries)
    .where(
        _d.event_id == bindparam("w_event_id"),
        _d.state == "dead",
        exists().where(_w.id == _d.subscription_id, _w.status == "active"),
    )
    .values(
        state="pending",
        attempts=0,
        next_attempt_us=bindparam("v_now"),
        claim_owner=None,
        claim_until_us=None,
    )
)


def delivery_from_row(r: Row) -> Delivery:
    return Delivery(
        id=r["id"],
        event_id=r["event_id"],
        subscription_id=r["subscription_id"],
        tenant=r["tenant"],
        hold_id=r["hold_id"],
        seq=r["seq"],
        state=r["state"],
        attempts=r["attempts"],
        next_attempt_at=from_us(r["next_attempt_us"]),
        created_at=from_us(r["created_us"]),
        claim_owner=r["claim_owner"],
        claim_until=opt_from_us(r["claim_until_us"]),
        delivered_at=opt_from_us(r["delivered_us"]),
        last_status=r["last_status"],
        last_error=r["last_error"],
    )


def _values(d: Delivery) -> dict[str, Any]:
    return {
        "id": d.id,
        "event_id": d.event_id,
        "subscription_id": d.subscription_id,
        "tenant": d.tenant,
        "hold_id": d.hold_id,
        "seq": d.seq,
        "state": d.state,
        "attempts": d.attempts,
        "next_attempt_us": to_us(d.next_attempt_at),
        "created_us": to_us(d.created_at),
        "claim_owner": d.claim_owner,
        "claim_until_us": opt_to_us(d.claim_until),
        "delivered_us": opt_to_us(d.delivered_at),
        "last_status": d.last_status,
        "last_error": d.last_error,
    }


def _saved(d: Delivery) -> dict[str, Any]:
    values = _values(d)
    return {"w_id": d.id, **{f"v_{k}": values[k] for k in _MUTABLE}}


def _attempt(r: Row) -> Attempt:
    return Attempt(r["delivery_id"], r["n"], from_us(r["at_us"]), r["status"], r["error"])


class SqlDeliveries:
    def __init__(self, db: Runner) -> None:
        self._db = db

    def add(self, deliveries: Sequence[Delivery]) -> None:
        if deliveries:
            self._db.put(_ADD, [_values(d) for d in deliveries])

    def claim(self, owner: str, now: datetime, until: datetime, limit: int) -> list[Claim]:
        rows = self._db.rows(_CLAIMABLE, {"now": to_us(now), "limit": limit})
        if not rows:
            return []
        claimed = [
            replace(delivery_from_row(r), claim_owner=owner, claim_until=until) for r in rows
        ]
        ids = [d.id for d in claimed]
        self._db.write(_CLAIM, {"ids": ids, "v_owner": owner, "v_until": to_us(until)})
        event_ids = sorted({d.event_id for d in claimed})
        events = {r["id"]: event_from_row(r) for r in self._db.rows(_EVENTS, {"ids": event_ids})}
        subscription_ids = sorted({d.subscription_id for d in claimed})
        found = self._db.rows(_SUBSCRIPTIONS, {"ids": subscription_ids})
        subscriptions = {r["id"]: subscription_from_row(r) for r in found}
        return [Claim(d, events[d.event_id], subscriptions[d.subscription_id]) for d in claimed]

    def get(self, delivery_id: str) -> Delivery | None:
        row = self._db.first(_GET, {"id": delivery_id})
        return None if row is None else delivery_from_row(row)

    def get_many(self, delivery_ids: Collection[str]) -> list[Delivery]:
        if not delivery_ids:
            return []
        rows = self._db.rows(_GET_MANY, {"ids": sorted(set(delivery_ids))})
        return [delivery_from_row(r) for r in rows]

    def save(self, delivery: Delivery) -> None:
        self._db.put(_SAVE, _saved(delivery))

    def save_many(self, deliveries: Sequence[Delivery]) -> None:
        if deliveries:
            self._db.put(_SAVE, [_saved(d) for d in deliveries])

    def add_attempts(self, tries: Sequence[tuple[str, datetime, int | None, str | None]]) -> None:
        if len({t[0] for t in tries}) != len(tries):
            raise ValueError("at most one attempt per delivery in one call")
        if tries:
            rows = [
                {"delivery_id": d, "at_us": to_us(at), "status": status, "error": error}
                for d, at, status, error in tries
            ]
            self._db.put(_ADD_NUMBERED, rows)

    def add_attempt(
        self, delivery_id: str, at: datetime, status: int | None, error: str | None
    ) -> Attempt:
        n = int(self._db.scalars(_LAST_N, {"id": delivery_id})[0]) + 1
        attempt = Attempt(delivery_id, n, at, status, error)
        row = {"delivery_id": delivery_id, "n": n, "at_us": to_us(at), "status": status}
        self._db.put(_ADD_ATTEMPT, {**row, "error": error})
        return attempt

    def attempts(self, delivery_id: str) -> list[Attempt]:
        return [_attempt(r) for r in self._db.rows(_ATTEMPTS, {"id": delivery_id})]

    def for_event(self, event_id: str) -> list[Delivery]:
        return [delivery_from_row(r) for r in self._db.rows(_FOR_EVENT, {"event_id": event_id})]

    def kill_pending(self, subscription_id: str, now: datetime, reason: str) -> list[str]:
        rows = self._db.rows(_PENDING_OF_SUBSCRIPTION, {"subscription_id": subscription_id})
        if rows:
            self._db.write(_KILL, {"ids": [r["id"] for r in rows], "v_reason": reason})
        return [r["event_id"] for r in rows]

    def remove_for_subscription(self, subscription_id: str) -> list[str]:
        rows = self._db.rows(_OF_SUBSCRIPTION, {"subscription_id": subscription_id})
        if rows:
            ids = [r["id"] for r in rows]
            self._db.write(_REMOVE_ATTEMPTS, {"ids": ids})
            self._db.write(_REMOVE, {"ids": ids})
        return [r["event_id"] for r in rows]

    def redrive(self, event_id: str, now: datetime) -> int:
        return self._db.write(_REDRIVE, {"w_event_id": event_id, "v_now": to_us(now)})
