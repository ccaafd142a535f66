"""Webhook subscriptions and named leases over one synchronous SQLAlchemy Core connection.

A subscription's topics and sealed secrets are JSON text (secrets: a list of
``{"sealed", "until_us"}``, the current one first). A lease is taken by one
upsert whose update applies only when the lease is over or already the
taker's: two processes taking it at once cannot both win, on either database.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from datetime import datetime
from typing import Any

from sqlalchemy import Insert, bindparam, delete, insert, or_, select, update
from sqlalchemy.dialects import postgresql, sqlite

from slotward.adapters.store import tables as t
from slotward.adapters.store.instants import from_us, opt_from_us, opt_to_us, to_us
from slotward.adapters.store.runner import Row, Runner
from slotward.engine.model import SealedSecret, Subscription

__all__ = ["SqlLeases", "SqlWebhooks", "subscription_from_row"]

_w = t.webhooks.c
_ADD = insert(t.webhooks)
_GET = select(t.webhooks).where(_w.id == bindparam("id"), _w.tenant == bindparam("tenant"))
_ACTIVE = (
    select(t.webhooks)
    .where(_w.status == "active", _w.tenant.in_(bindparam("tenants", expanding=True)))
    .order_by(_w.id)
)
_MUTABLE = (
    "status", "disabled_reason", "secrets", "topics", "description", "updated_us",
    "last_attempt_us", "last_status", "last_delivery_us", "consecutive_failures",
    "failing_since_us",
)  # fmt: skip
_SAVE = (
    update(t.webhooks)
    .where(_w.id == bindparam("w_id"), _w.tenant == bindparam("w_tenant"))
    .values({name: bindparam(f"v_{name}") for name in _MUTABLE})
)
_REMOVE = delete(t.webhooks).where(_w.id == bindparam("id"), _w.tenant == bindparam("tenant"))


def _secrets(text: str) -> tuple[SealedSecret, ...]:
    return tuple(SealedSecret(s["sealed"], opt_from_us(s["until_us"])) for s in json.loads(text))


def subscription_from_row(r: Row) -> Subscription:
    return Subscription(
        id=r["id"],
        tenant=r["tenant"],
        url=r["url"],
        topics=tuple(json.loads(r["topics"])),
        description=r["description"],
        status=r["status"],
        secrets=_secrets(r["secrets"]),
        created_at=from_us(r["created_us"]),
        updated_at=from_us(r["updated_us"]),
        disabled_reason=r["disabled_reason"],
        last_attempt_at=opt_from_us(r["last_attempt_us"]),
        last_status=r["last_status"],
        last_delivery_at=opt_from_us(r["last_delivery_us"]),
        consecutive_failures=r["consecutive_failures"],
        failing_since=opt_from_us(r["failing_since_us"]),
    )


def _values(s: Subscription) -> dict[str, Any]:
    secrets = [{"sealed": x.sealed, "until_us": opt_to_us(x.until)} for x in s.secrets]
    return {
        "id": s.id,
        "tenant": s.tenant,
        "url": s.url,
        "topics": json.dumps(list(s.topics)),
        "description": s.description,
        "status": s.status,
        "disabled_reason": s.disabled_reason,
        "secrets": json.dumps(secrets, separators=(",", ":")),
        "created_us": to_us(s.created_at),
        "updated_us": to_us(s.updated_at),
        "last_attempt_us": opt_to_us(s.last_attempt_at),
        "last_status": s.last_status,
        "last_delivery_us": opt_to_us(s.last_delivery_at),
        "consecutive_failures": s.consecutive_failures,
        "failing_since_us": opt_to_us(s.failing_since),
    }


class SqlWebhooks:
    def __init__(self, db: Runner) -> None:
        self._db = db

    def add(self, subscription: Subscription) -> None:
        self._db.write(_ADD, _values(subscription))

    def get(self, tenant: str, subscription_id: str) -> Subscription | None:
        row = self._db.first(_GET, {"id": subscription_id, "tenant": tenant})
        return None if row is None else subscription_from_row(row)

    def search(self, tenant: str, after_id: str | None, limit: int) -> list[Subscription]:
        q = select(t.webhooks).where(_w.tenant == tenant).order_by(_w.id).limit(limit)
        if after_id is not None:
            q = q.where(_w.id > after_id)
        return [subscription_from_row(r) for r in self._db.dynamic(q)]

    def active(self, tenants: Collection[str]) -> list[Subscription]:
        if not tenants:
            return []
        rows = self._db.rows(_ACTIVE, {"tenants": sorted(set(tenants))})
        return [subscription_from_row(r) for r in rows]

    def save(self, subscription: Subscription) -> None:
        values = _values(subscription)
        where = {"w_id": subscription.id, "w_tenant": subscription.tenant}
        self._db.put(_SAVE, {**where, **{f"v_{k}": values[k] for k in _MUTABLE}})

    def remove(self, tenant: str, subscription_id: str) -> bool:
        return self._db.write(_REMOVE, {"id": subscription_id, "tenant": tenant}) == 1


_l = t.leases.c


def _take(dialect: Any) -> Insert:
    """Insert the lease, or take it over when it is over or the owner's already."""
    stmt = dialect.insert(t.leases).values(
        name=bindparam("v_name"), owner=bindparam("v_owner"), until_us=bindparam("v_until")
    )
    # RETURNING says whether it was taken: a row count of an upsert is not
    # reported alike by every driver (psycopg's through SQLAlchemy: -1).
    return stmt.on_conflict_do_update(  # type: ignore[no-any-return]
        index_elements=[_l.name],
        set_={"owner": stmt.excluded.owner, "until_us": stmt.excluded.until_us},
        where=or_(_l.until_us <= bindparam("w_now"), _l.owner == stmt.excluded.owner),
    ).returning(_l.owner)


_TAKE = {"sqlite": _take(sqlite), "postgresql": _take(postgresql)}
_DROP = delete(t.leases).where(_l.name == bindparam("name"), _l.owner == bindparam("owner"))


class SqlLeases:
    def __init__(self, db: Runner) -> None:
        self._db = db
        self._take = _TAKE[db.conn.dialect.name]

    def take(self, name: str, owner: str, now: datetime, until: datetime) -> bool:
        params = {"v_name": name, "v_owner": owner, "v_until": to_us(until), "w_now": to_us(now)}
        return len(self._db.rows(self._take, params)) == 1

    def drop(self, name: str, owner: str) -> None:
        self._db.write(_DROP, {"name": name, "owner": owner})
