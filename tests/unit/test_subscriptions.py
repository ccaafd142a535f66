"""The webhook admin use cases on the in-memory fakes: subscriptions and dead letters.

Each call runs in its own unit of work over one shared ``State``, as the store
would run it. Deliveries and their attempts are set up through the ports, as
the relay would write them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from slotward.api.http.statuses import status_of
from slotward.engine.clock import FixedClock
from slotward.engine.errors import Conflict, NotFound
from slotward.engine.fakes import InMemoryUnitOfWork, SequentialIds, State
from slotward.engine.model import (
    Delivery,
    DeliveryState,
    OutboxEvent,
    Principal,
    SealedSecret,
    Subscription,
)
from slotward.engine.rules.documents import encode
from slotward.engine.rules.policy import Policy
from slotward.engine.usecases import subscriptions as uc

T0 = datetime(2030, 10, 1, 9, 0, tzinfo=UTC)
ADMIN = Principal("acme", "ops", "admin", 0)
OUTSIDER = Principal("globex", "ops", "admin", 0)


@dataclass
class World:
    state: State = field(default_factory=State)
    clock: FixedClock = field(default_factory=lambda: FixedClock(T0))
    ids: SequentialIds = field(default_factory=SequentialIds)
    policy: Policy = field(default_factory=Policy)

    def uow(self) -> InMemoryUnitOfWork:
        return InMemoryUnitOfWork(self.state)

    def subscribe(
        self, who: Principal = ADMIN, topics: tuple[str, ...] = ("hold.*",)
    ) -> dict[str, Any]:
        new = uc.NewSubscription(
            self.ids.new_id("wh"), "https://hooks.example.com/x", topics, "ops hook",
            SealedSecret(f"sealed-{self.ids.new_id('s')}"),
        )  # fmt: skip
        return uc.create_subscription(self.uow(), who, new, self.policy, self.clock)

    def stored(self, sub_id: str, tenant: str = "acme") -> Subscription:
        uow = self.uow()
        with uow:
            found = uow.webhooks.get(tenant, sub_id)
        assert found is not None
        return found

    def event(self, tenant: str = "acme", *, fanned: bool = True) -> str:
        """An outbox event of a hold, fanned out to no delivery yet."""
        uow = self.uow()
        with uow:
            event_id = self.ids.new_id("evt")
            uow.outbox.add(
                OutboxEvent(event_id, tenant, "hold.created", self.clock.now(), {}, "hold_1", 1)
            )
            if fanned:
                uow.outbox.mark_fanned([event_id])
            uow.commit()
        return event_id

    def deliver(self, event_id: str, sub_id: str, state: DeliveryState, tries: int = 1) -> str:
        """A delivery of ``event_id`` to ``sub_id`` in ``state`` after ``tries`` attempts."""
        uow = self.uow()
        with uow:
            now = self.clock.now()
            delivery = Delivery(
                id=self.ids.new_id("dlv"), event_id=event_id, subscription_id=sub_id,
                tenant="acme", hold_id="hold_1", seq=1, state=state, attempts=tries,
                next_attempt_at=now, created_at=now, last_status=500, last_error="HTTP 500",
            )  # fmt: skip
            uow.deliveries.add([delivery])
            for _ in range(tries):
                uow.deliveries.add_attempt(delivery.id, now, 500, "HTTP 500")
            uow.outbox.settle([event_id], now)
            uow.commit()
        return delivery.id

    def disable(self, sub_id: str) -> None:
        uow = self.uow()
        with uow:
            sub = uow.webhooks.get("acme", sub_id)
            assert sub is not None
            uow.webhooks.save(replace(sub, status="disabled", disabled_reason="410 Gone"))
            uow.commit()

    def audit_actions(self, tenant: str = "acme") -> list[tuple[str, str | None, str]]:
        uow = self.uow()
        with uow:
            return [(e.action, e.key, e.outcome) for e in uow.audit.entries(tenant, 0, 100)]

    def event_doc(self, event_id: str, who: Principal = ADMIN) -> dict[str, Any]:
        return uc.get_event(self.uow(), who, event_id)


@pytest.fixture
def world() -> World:
    return World()


# -- subscriptions ---------------------------------------------------------------------


def test_a_subscription_is_stored_active_and_its_document_has_no_secret(world: World) -> None:
    doc = world.subscribe()
    stored = world.stored(doc["id"])
    assert stored.status == "active"
    assert stored.secrets[0].sealed.startswith("sealed-")
    assert stored.secrets[0].sealed.encode() not in encode(doc)
    assert doc == {
        "id": doc["id"], "url": "https://hooks.example.com/x", "topics": ["hold.*"],
        "description": "ops hook", "status": "active", "disabled_reason": None,
        "created_at": "2030-10-01T09:00:00Z", "updated_at": "2030-10-01T09:00:00Z",
        "last_attempt_at": None, "last_status": None, "last_delivery_at": None,
        "consecutive_failures": 0, "failing_since": None,
        "secrets": [{"current": True, "until": None}],
    }  # fmt: skip
    assert world.audit_actions() == [("webhook.create", doc["id"], "created")]


def test_subscriptions_are_listed_a_page_at_a_time_and_only_the_tenants(world: World) -> None:
    made = [world.subscribe()["id"] for _ in range(3)]
    world.subscribe(OUTSIDER)
    first = uc.list_subscriptions(world.uow(), ADMIN, cursor=None, limit=2)
    assert [s["id"] for s in first["items"]] == made[:2]
    assert first["next_cursor"] == made[1]
    rest = uc.list_subscriptions(world.uow(), ADMIN, cursor=first["next_cursor"], limit=2)
    assert ([s["id"] for s in rest["items"]], rest["next_cursor"]) == (made[2:], None)


def test_another_tenants_subscription_is_not_found(world: World) -> None:
    theirs = world.subscribe(OUTSIDER)["id"]
    calls: list[Callable[[], object]] = [
        lambda: uc.get_subscription(world.uow(), ADMIN, theirs),
        lambda: uc.rotate_secret(world.uow(), ADMIN, theirs, SealedSecret("n"),
                                 timedelta(hours=1), world.policy, world.clock),
        lambda: uc.delete_subscription(world.uow(), ADMIN, theirs, world.policy, world.clock),
    ]  # fmt: skip
    for call in calls:
        with pytest.raises(NotFound) as caught:
            call()
        assert caught.value.code == "webhook_not_found"
        assert status_of(caught.value) == 404
    assert world.stored(theirs, "globex").secrets[0].until is None
    assert world.audit_actions() == []


def test_a_rotation_makes_the_new_secret_current_and_the_old_one_sign_for_the_overlap(
    world: World,
) -> None:
    sub_id = world.subscribe()["id"]
    old = world.stored(sub_id).secrets[0]
    world.clock.advance(300)
    doc = uc.rotate_secret(world.uow(), ADMIN, sub_id, SealedSecret("new-1"),
                           timedelta(hours=24), world.policy, world.clock)  # fmt: skip
    until = world.clock.now() + timedelta(hours=24)
    assert world.stored(sub_id).secrets == (SealedSecret("new-1"), SealedSecret(old.sealed, until))
    assert doc["secrets"] == [
        {"current": True, "until": None},
        {"current": False, "until": "2030-10-02T09:05:00Z"},
    ]
    assert doc["updated_at"] == "2030-10-01T09:05:00Z"
    assert b"new-1" not in encode(doc)
    assert world.audit_actions()[-1] == ("webhook.rotate", sub_id, "rotated")


def test_secrets_past_their_overlap_are_dropped_at_the_next_rotation(world: World) -> None:
    sub_id = world.subscribe()["id"]

    def rotate(sealed: str, hours: int) -> None:
        uc.rotate_secret(world.uow(), ADMIN, sub_id, SealedSecret(sealed),
                         timedelta(hours=hours), world.policy, world.clock)  # fmt: skip

    rotate("second", 1)
    world.clock.advance(1800)
    rotate("third", 2)  # the first still signs for 30 minutes
    assert [s.sealed for s in world.stored(sub_id).secrets][:2] == ["third", "second"]
    assert len(world.stored(sub_id).secrets) == 3
    world.clock.advance(3600)
    rotate("fourth", 0)  # the first is past; with no overlap, so is "third"
    assert [s.sealed for s in world.stored(sub_id).secrets] == ["fourth", "second"]


def test_rotated_keeps_only_what_still_signs() -> None:
    now = T0
    current, live, past = (
        SealedSecret("c"),
        SealedSecret("l", now + timedelta(hours=1)),
        (SealedSecret("p", now)),
    )
    assert uc.rotated((current, live, past), SealedSecret("n", now), now, timedelta(hours=2)) == (
        SealedSecret("n"), SealedSecret("c", now + timedelta(hours=2)), live,
    )  # fmt: skip


def test_rotations_piling_up_keep_the_current_secret_and_two_more() -> None:
    secrets: tuple[SealedSecret, ...] = (SealedSecret("s0"),)
    for n in range(1, 6):  # five rotations within one overlap
        secrets = uc.rotated(secrets, SealedSecret(f"s{n}"), T0, timedelta(hours=24))
    assert [s.sealed for s in secrets] == ["s5", "s4", "s3"]
    assert len(secrets) == uc.MAX_SECRETS


def test_a_deleted_subscription_is_gone_with_its_deliveries_and_its_events_settle(
    world: World,
) -> None:
    sub_id = world.subscribe()["id"]
    other = world.subscribe()["id"]
    lone, shared = world.event(), world.event()
    world.deliver(lone, sub_id, "pending")
    world.deliver(shared, sub_id, "pending")
    world.deliver(shared, other, "dead")
    uc.delete_subscription(world.uow(), ADMIN, sub_id, world.policy, world.clock)
    with pytest.raises(NotFound):
        uc.get_subscription(world.uow(), ADMIN, sub_id)
    assert world.event_doc(lone)["state"] == "delivered"  # nothing left to wait for
    assert world.event_doc(lone)["deliveries"] == []
    left = world.event_doc(shared)
    assert (left["state"], [d["subscription_id"] for d in left["deliveries"]]) == (
        "dead", [other],
    )  # fmt: skip
    assert world.audit_actions()[-1] == ("webhook.delete", sub_id, "deleted")


# -- the outbox ------------------------------------------------------------------------


def test_events_are_listed_with_their_deliveries_and_attempt_logs(world: World) -> None:
    sub_id = world.subscribe()["id"]
    dead, pending = world.event(), world.event()
    delivery = world.deliver(dead, sub_id, "dead", tries=2)
    world.deliver(pending, sub_id, "pending", tries=0)
    world.event("globex")
    page = uc.list_events(world.uow(), ADMIN, state=None, cursor=None, limit=10)
    assert [e["id"] for e in page["items"]] == [dead, pending]
    only_dead = uc.list_events(world.uow(), ADMIN, state="dead", cursor=None, limit=10)
    assert [e["id"] for e in only_dead["items"]] == [dead]
    doc = only_dead["items"][0]
    assert {k: doc[k] for k in ("type", "hold_id", "seq", "state", "settled_at")} == {
        "type": "hold.created", "hold_id": "hold_1", "seq": 1, "state": "dead",
        "settled_at": "2030-10-01T09:00:00Z",
    }  # fmt: skip
    assert doc["deliveries"] == [
        {
            "id": delivery, "subscription_id": sub_id, "state": "dead", "attempts": 2,
            "next_attempt_at": "2030-10-01T09:00:00Z", "delivered_at": None,
            "last_status": 500, "last_error": "HTTP 500",
            "log": [
                {"n": 1, "at": "2030-10-01T09:00:00Z", "status": 500, "error": "HTTP 500"},
                {"n": 2, "at": "2030-10-01T09:00:00Z", "status": 500, "error": "HTTP 500"},
            ],
        }
    ]  # fmt: skip
    first = uc.list_events(world.uow(), ADMIN, state=None, cursor=None, limit=1)
    assert first["next_cursor"] == dead
    rest = uc.list_events(world.uow(), ADMIN, state=None, cursor=dead, limit=1)
    assert ([e["id"] for e in rest["items"]], rest["next_cursor"]) == ([pending], None)


def test_another_tenants_event_is_not_found(world: World) -> None:
    theirs = world.event("globex")
    calls: list[Callable[[], object]] = [
        lambda: uc.get_event(world.uow(), ADMIN, theirs),
        lambda: uc.redrive_event(world.uow(), ADMIN, theirs, world.policy, world.clock),
    ]
    for call in calls:
        with pytest.raises(NotFound) as caught:
            call()
        assert caught.value.code == "event_not_found"


def test_a_redrive_sends_the_dead_deliveries_again_and_keeps_their_log(world: World) -> None:
    sub_id = world.subscribe()["id"]
    event_id = world.event()
    world.deliver(event_id, sub_id, "dead", tries=3)
    world.clock.advance(3600)
    doc = uc.redrive_event(world.uow(), ADMIN, event_id, world.policy, world.clock)
    assert (doc["state"], doc["settled_at"]) == ("pending", None)
    [delivery] = doc["deliveries"]
    assert (delivery["state"], delivery["attempts"]) == ("pending", 0)
    assert delivery["next_attempt_at"] == "2030-10-01T10:00:00Z"
    assert len(delivery["log"]) == 3
    assert doc == world.event_doc(event_id)
    assert world.audit_actions()[-1] == ("outbox.redrive", event_id, "redriven")


def test_an_event_with_nothing_dead_cannot_be_redriven(world: World) -> None:
    sub_id = world.subscribe()["id"]
    event_id = world.event()
    world.deliver(event_id, sub_id, "pending")
    with pytest.raises(Conflict) as caught:
        uc.redrive_event(world.uow(), ADMIN, event_id, world.policy, world.clock)
    assert caught.value.code == "nothing_to_redrive"
    assert status_of(caught.value) == 409
    assert "no dead delivery" in caught.value.detail
    assert "pending" in caught.value.detail
    assert [a for a, *_ in world.audit_actions()] == ["webhook.create"]


def test_a_dead_delivery_to_a_disabled_subscription_cannot_be_redriven(world: World) -> None:
    sub_id = world.subscribe()["id"]
    event_id = world.event()
    world.deliver(event_id, sub_id, "dead")
    world.disable(sub_id)
    with pytest.raises(Conflict) as caught:
        uc.redrive_event(world.uow(), ADMIN, event_id, world.policy, world.clock)
    assert caught.value.code == "nothing_to_redrive"
    assert f"{sub_id} (disabled)" in caught.value.detail
    assert "cannot be re-driven" in caught.value.detail
    assert world.event_doc(event_id)["deliveries"][0]["state"] == "dead"
