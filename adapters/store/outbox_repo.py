"""The outbox over one synchronous SQLAlchemy Core connection.

An event is written in the transaction of the change it announces, then fanned
out by the relay into deliveries (adapters/store/delivery_repos.py) and settled
from them. Statements are built once, at import (see hold_repo.py); on SQLite
``FOR UPDATE SKIP LOCKED`` renders as nothing, and one relay runs at a time
(it holds the "relay" lease).
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any

import orjson
from sqlalchemy import bindparam, delete, insert, select, update
from sqlalchemy.sql.elements import BindParameter

from slotward.adapters.store import tables as t
from slotward.adapters.store.instants import from_us, opt_from_us, opt_to_us, to_us
from slotward.adapters.store.runner import Row, Runner
from slotward.engine.model import DeliveryState, OutboxEvent
from slotward.engine.rules.delivery import settled_state

__all__ = ["SqlOutbox", "event_from_row"]

_o = t.outbox.c
_d = t.deliveries.c
_IDS: BindParameter[Any] = bindparam("ids", expanding=True)

_ADD = insert(t.outbox)
_UNFANNED = (
    select(t.outbox)
    .where(_o.fanned.is_(False))
    .order_by(_o.created_us, _o.id)
    .limit(bindparam("limit"))
    .with_for_update(skip_locked=True)  # two relays never fan out one event
)
_MARK_FANNED = update(t.outbox).where(_o.id.in_(_IDS)).values(fanned=True)
_MARK_UNWANTED = (
    update(t.outbox)
    .where(_o.id.in_(_IDS), _o.fanned.is_(False))
    .values(fanned=True, state="delivered", settled_us=bindparam("now"))
)


# Settling reads the events' deliveries by event (ux_deliveries_event_subscription)
# and decides in Python: as one UPDATE with EXISTS per state, SQLite's planner
# took the state index instead and scanned every pending delivery per event.
_STATES_OF = select(_d.event_id, _d.state).where(_d.event_id.in_(_IDS))
_FANNED_OF = select(_o.id, _o.state, _o.settled_us).where(_o.id.in_(_IDS), _o.fanned.is_(True))
_SETTLE = (
    update(t.outbox)
    .where(_o.id == bindparam("w_id"))
    .values(state=bindparam("v_state"), settled_us=bindparam("v_settled_us"))
)
_GET = select(t.outbox).where(_o.id == bindparam("id"), _o.tenant == bindparam("tenant"))
# An event is settled after it is made, so one settled before the cutoff was
# made before it too: the index (state, created_us) then reads only the events
# made before the cutoff, in order, and stops at the limit. Filtered and sorted
# by settled_us alone, each sweep read and sorted every delivered event kept
# (every create's, for the retention), to purge none. One settled after the
# cutoff but made before it (delivered late) is read and passed over until its
# settling is old enough; after the clock was set back, one made "after" the
# cutoff waits until it is not: purged late, never early.
_PURGEABLE = (
    select(_o.id)
    .where(
        _o.state == "delivered",
        _o.created_us < bindparam("before"),
        _o.settled_us < bindparam("before"),
    )
    .order_by(_o.created_us, _o.id)
    .limit(bindparam("limit"))
)
_PURGE_ATTEMPTS = delete(t.delivery_attempts).where(
    t.delivery_attempts.c.delivery_id.in_(select(_d.id).where(_d.event_id.in_(_IDS)))
)
_PURGE_DELIVERIES = delete(t.deliveries).where(_d.event_id.in_(_IDS))
_PURGE_EVENTS = delete(t.outbox).where(_o.id.in_(_IDS))


def _payload(event_type: str, text: str) -> Any:
    # A hold's event (most of them: the relay reads every one a create writes)
    # holds hold_document's strings, small integers and nulls, which orjson
    # reads as json does, at a quarter of the cost (2.3 against 8.6 us). Other
    # events may carry a client's JSON, where orjson would read an integer
    # beyond 64 bits as a float: json reads those.
    if event_type.startswith("hold."):
        return orjson.loads(text)
    return json.loads(text)


def _payload_text(event_type: str, payload: Any) -> str:
    # A hold's event, as _payload reads it: orjson writes hold_document's
    # values as json does (compact; non-ASCII as UTF-8, not escaped: the same
    # value read back), at a fifth of the cost (some 5% of a create on SQLite's
    # writer). Anything orjson refuses (an integer beyond 64 bits, a lone
    # surrogate, a key that is not a string) and other events go to json.
    if event_type.startswith("hold."):
        try:
            return orjson.dumps(payload).decode()
        except orjson.JSONEncodeError:
            pass
    return json.dumps(payload, separators=(",", ":"))


def event_from_row(r: Row) -> OutboxEvent:
    return OutboxEvent(
        id=r["id"],
        tenant=r["tenant"],
        type=r["type"],
        created_at=from_us(r["created_us"]),
        payload=_payload(r["type"], r["payload"]),
        hold_id=r["hold_id"],
        seq=r["seq"],
        state=r["state"],
        fanned=bool(r["fanned"]),
        settled_at=opt_from_us(r["settled_us"]),
    )


class SqlOutbox:
    def __init__(self, db: Runner) -> None:
        self._db = db

    def add(self, event: OutboxEvent) -> None:
        self._db.put(
            _ADD,
            {
                "id": event.id,
                "tenant": event.tenant,
                "type": event.type,
                "hold_id": event.hold_id,
                "payload": _payload_text(event.type, event.payload),
                "state": event.state,
                "created_us": to_us(event.created_at),
                "seq": event.seq,
                "fanned": event.fanned,
                "settled_us": opt_to_us(event.settled_at),
            },
        )

    def unfanned(self, limit: int) -> list[OutboxEvent]:
        return [event_from_row(r) for r in self._db.rows(_UNFANNED, {"limit": limit})]

    def mark_fanned(self, event_ids: Sequence[str]) -> None:
        if event_ids:
            self._db.put(_MARK_FANNED, {"ids": list(event_ids)})

    def mark_unwanted(self, event_ids: Sequence[str], now: datetime) -> None:
        if event_ids:
            self._db.put(_MARK_UNWANTED, {"ids": list(event_ids), "now": to_us(now)})

    def settle(self, event_ids: Collection[str], now: datetime) -> None:
        if not event_ids:
            return
        ids = {"ids": sorted(event_ids)}
        states: dict[str, set[str]] = {}
        for r in self._db.rows(_STATES_OF, ids):  # a read: the deliveries' writes go first
            states.setdefault(r["event_id"], set()).add(r["state"])
        changes = []
        for r in self._db.rows(_FANNED_OF, ids):
            state = settled_state(states.get(r["id"], set()))
            if state == r["state"]:
                continue
            settled = None if state == "pending" else to_us(now)
            changes.append({"w_id": r["id"], "v_state": state, "v_settled_us": settled})
        if changes:
            self._db.put(_SETTLE, changes)

    def get(self, tenant: str, event_id: str) -> OutboxEvent | None:
        row = self._db.first(_GET, {"id": event_id, "tenant": tenant})
        return None if row is None else event_from_row(row)

    def search(
        self, tenant: str, state: DeliveryState | None, after_id: str | None, limit: int
    ) -> list[OutboxEvent]:
        q = select(t.outbox).where(_o.tenant == tenant).order_by(_o.id).limit(limit)
        if state is not None:
            q = q.where(_o.state == state)
        if after_id is not None:
            q = q.where(_o.id > after_id)
        return [event_from_row(r) for r in self._db.dynamic(q)]

    def purge_delivered(self, before: datetime, limit: int) -> int:
        ids = self._db.scalars(_PURGEABLE, {"before": to_us(before), "limit": limit})
        if not ids:
            return 0
        self._db.write(_PURGE_ATTEMPTS, {"ids": ids})
        self._db.write(_PURGE_DELIVERIES, {"ids": ids})
        return self._db.write(_PURGE_EVENTS, {"ids": ids})
