"""Webhooks: a tenant's subscriptions, kept apart from every other tenant's."""

from __future__ import annotations

from dataclasses import replace

import pytest
from sqlalchemy.exc import IntegrityError

from slotward.engine.model import SealedSecret, Subscription
from slotward.engine.ports import UnitOfWork
from tests.contract.conftest import Db
from tests.contract.values import at, subscription


def _ids(subscriptions: list[Subscription]) -> list[str]:
    return [s.id for s in subscriptions]


def test_a_subscription_reads_back_as_written(db: Db) -> None:
    written = subscription(
        "whk_1",
        topics=("hold.created", "hold.committed"),
        description="Calendar sync — prod",
        last_attempt_at=at(1),
        last_status=500,
        consecutive_failures=2,
        failing_since=at(0),
    )
    db.commit(lambda uow: uow.webhooks.add(written))
    assert db.look(lambda uow: uow.webhooks.get("acme", "whk_1")) == written


def test_another_tenant_sees_none_of_them(db: Db) -> None:
    db.commit(lambda uow: uow.webhooks.add(subscription("whk_1")))
    assert db.look(lambda uow: uow.webhooks.get("other", "whk_1")) is None
    assert db.look(lambda uow: uow.webhooks.search("other", None, 10)) == []
    assert db.commit(lambda uow: uow.webhooks.remove("other", "whk_1")) is False
    assert db.look(lambda uow: uow.webhooks.get("acme", "whk_1")) is not None


def test_an_id_is_stored_once(db: Db) -> None:
    db.commit(lambda uow: uow.webhooks.add(subscription("whk_1")))
    with pytest.raises((KeyError, IntegrityError)):
        db.commit(lambda uow: uow.webhooks.add(subscription("whk_1", tenant="other")))


def test_search_pages_in_id_order_active_and_disabled_alike(db: Db) -> None:
    def add(uow: UnitOfWork) -> None:
        uow.webhooks.add(subscription("whk_3"))
        uow.webhooks.add(subscription("whk_1", status="disabled"))
        uow.webhooks.add(subscription("whk_2"))
        uow.webhooks.add(subscription("whk_0", tenant="other"))

    db.commit(add)
    assert _ids(db.look(lambda uow: uow.webhooks.search("acme", None, 10))) == [
        "whk_1",
        "whk_2",
        "whk_3",
    ]
    assert _ids(db.look(lambda uow: uow.webhooks.search("acme", "whk_1", 1))) == ["whk_2"]


def test_active_lists_the_active_ones_of_the_tenants_asked_for(db: Db) -> None:
    def add(uow: UnitOfWork) -> None:
        uow.webhooks.add(subscription("whk_1"))
        uow.webhooks.add(subscription("whk_2", status="disabled"))
        uow.webhooks.add(subscription("whk_3", tenant="other"))
        uow.webhooks.add(subscription("whk_4", tenant="third"))

    db.commit(add)
    assert _ids(db.look(lambda uow: uow.webhooks.active(["acme", "other"]))) == ["whk_1", "whk_3"]
    assert db.look(lambda uow: uow.webhooks.active([])) == []


def test_save_writes_back_what_may_change(db: Db) -> None:
    db.commit(lambda uow: uow.webhooks.add(subscription("whk_1")))
    changed = replace(
        subscription("whk_1"),
        status="disabled",
        disabled_reason="410 Gone",
        secrets=(SealedSecret("sealed-new"), SealedSecret("sealed-current", at(30))),
        topics=("hold.released",),
        description="renamed",
        updated_at=at(2),
        last_attempt_at=at(2),
        last_status=410,
        last_delivery_at=at(1),
        consecutive_failures=0,
        failing_since=None,
    )
    db.commit(lambda uow: uow.webhooks.save(replace(changed, url="https://elsewhere.example")))
    assert db.look(lambda uow: uow.webhooks.get("acme", "whk_1")) == changed
    db.commit(lambda uow: uow.webhooks.save(replace(changed, tenant="other", status="active")))
    found = db.look(lambda uow: uow.webhooks.get("acme", "whk_1"))
    assert found is not None
    assert found.status == "disabled"


def test_remove_deletes_it(db: Db) -> None:
    db.commit(lambda uow: uow.webhooks.add(subscription("whk_1")))
    assert db.commit(lambda uow: uow.webhooks.remove("acme", "whk_1")) is True
    assert db.look(lambda uow: uow.webhooks.get("acme", "whk_1")) is None
    assert db.commit(lambda uow: uow.webhooks.remove("acme", "whk_1")) is False
