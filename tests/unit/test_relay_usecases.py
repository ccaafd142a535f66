"""The relay's transactions on the in-memory fakes: fan-out, claims, outcomes, disabling.

Time moves only when a test advances the clock; the jitter's source is fixed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest

from slotward.engine.clock import FixedClock
from slotward.engine.fakes import InMemoryUnitOfWork, SequentialIds, State
from slotward.engine.model import Claim, Delivery, OutboxEvent, SealedSecret, Subscription
from slotward.engine.rules.audit import verify_chain
from slotward.engine.rules.delivery import Outcome, RelaySettings
from slotward.engine.usecases.relay import (
    FAN_OUT_BATCH,
    Result,
    claim_work,
    purge_delivered,
    record_results,
    take_relay_lease,
)

T0 = datetime(2030, 10, 1, 9, 0, tzinfo=UTC)
TENANT = "acme"
SETTINGS = RelaySettings(schedule=(0.0, 10.0, 60.0), timeout=5.0)
LEASE = SETTINGS.lease


@dataclass
class World:
    state: State = field(default_factory=State)
    clock: FixedClock = field(default_factory=lambda: FixedClock(T0))
    ids: SequentialIds = field(default_factory=SequentialIds)
    rand: float = 0.5  # no jitter: 2 * 0.5 - 1 == 0

    def uow(self) -> InMemoryUnitOfWork:
        return InMemoryUnitOfWork(self.state)

    def subscribe(
        self, topics: tuple[str, ...] = ("hold.*",), tenant: str = TENANT, status: str = "active"
    ) -> Subscription:
        now = self.clock.now()
        sub = Subscription(
            id=self.ids.new_id("wh"),
            tenant=tenant,
            url="https://hooks.example.com/in",
            topics=topics,
            description=None,
            status="active" if status == "active" else "disabled",
            secrets=(SealedSecret("sealed"),),
            created_at=now,
            updated_at=now,
        )
        with self.uow() as uow:
            uow.webhooks.add(sub)
            uow.commit()
        return sub

    def event(
        self, kind: str = "hold.created", hold: str | None = "hold_1", seq: int | None = 1
    ) -> OutboxEvent:
        event = OutboxEvent(
            self.ids.new_id("evt"), TENANT, kind, self.clock.now(), {"x": 1}, hold, seq=seq
        )
        with self.uow() as uow:
            uow.outbox.add(event)
            uow.commit()
        return event

    def claim(self, owner: str = "relay-a", limit: int = 10) -> list[Claim]:
        return claim_work(self.uow(), self.clock, self.ids, owner, limit, SETTINGS).claims

    def record(self, *results: Result) -> None:
        record_results(
            self.uow(), self.clock, self.ids, results, SETTINGS, lambda: self.rand, audit_key=None
        )

    def answer(self, claim: Claim, status: int | None, retry_after: float | None = None) -> None:
        error = None if status is not None and 200 <= status < 300 else f"status {status}"
        self.record(
            Result(claim.delivery.id, TENANT, self.clock.now(), Outcome(status, error, retry_after))
        )

    def delivery(self, delivery_id: str) -> Delivery:
        with self.uow() as uow:
            found = uow.deliveries.get(delivery_id)
        assert found is not None
        return found

    def state_of(self, event: OutboxEvent) -> str:
        with self.uow() as uow:
            found = uow.outbox.get(TENANT, event.id)
        assert found is not None
        return found.state

    def sub(self, sub: Subscription) -> Subscription:
        with self.uow() as uow:
            found = uow.webhooks.get(sub.tenant, sub.id)
        assert found is not None
        return found


@pytest.fixture
def world() -> World:
    return World()


def test_an_event_no_subscription_wants_is_delivered_at_once(world: World) -> None:
    world.subscribe(("workflow.retry_storm",))
    world.subscribe(tenant="globex")  # another tenant's subscription never sees it
    event = world.event()
    assert world.claim() == []
    assert world.state_of(event) == "delivered"


def test_a_matching_subscription_gets_one_delivery_claimed_at_once(world: World) -> None:
    sub = world.subscribe()
    world.subscribe(status="disabled")
    event = world.event()
    [claim] = world.claim()
    assert (claim.event.id, claim.subscription.id) == (event.id, sub.id)
    assert claim.delivery.claim_owner == "relay-a"
    assert claim.delivery.claim_until == T0 + LEASE
    assert world.state_of(event) == "pending"


def test_a_claim_is_another_relays_only_once_its_lease_ran_out(world: World) -> None:
    world.subscribe()
    world.event()
    [first] = world.claim("relay-a")
    assert world.claim("relay-b") == []
    world.clock.advance(LEASE.total_seconds())
    [again] = world.claim("relay-b")  # relay-a died: nothing is lost
    assert again.delivery.id == first.delivery.id
    assert again.delivery.claim_owner == "relay-b"


def test_success_delivers_the_event_and_resets_the_subscriptions_failures(world: World) -> None:
    sub = world.subscribe()
    event = world.event()
    [claim] = world.claim()
    world.answer(claim, 500)
    world.clock.advance(10)
    [claim] = world.claim()
    world.answer(claim, 204)
    done = world.delivery(claim.delivery.id)
    assert (done.state, done.attempts, done.claim_owner) == ("delivered", 2, None)
    assert world.state_of(event) == "delivered"
    figures = world.sub(sub)
    assert (figures.consecutive_failures, figures.failing_since, figures.last_status) == (
        0,
        None,
        204,
    )
    with world.uow() as uow:
        log = uow.deliveries.attempts(claim.delivery.id)
    assert [(a.n, a.status) for a in log] == [(1, 500), (2, 204)]


def test_failures_follow_the_schedule_then_the_delivery_is_dead(world: World) -> None:
    sub = world.subscribe()
    event = world.event()
    [claim] = world.claim()
    world.answer(claim, 500)
    assert world.delivery(claim.delivery.id).next_attempt_at == T0 + timedelta(seconds=10)
    world.clock.advance(9)
    assert world.claim() == []  # not due yet
    world.clock.advance(1)
    [claim] = world.claim()
    world.answer(claim, None)
    assert world.delivery(claim.delivery.id).next_attempt_at == world.clock.now() + timedelta(
        seconds=60
    )
    world.clock.advance(60)
    [claim] = world.claim()
    world.answer(claim, 502)  # the third and last attempt of the schedule
    assert world.delivery(claim.delivery.id).state == "dead"
    assert world.state_of(event) == "dead"
    assert world.sub(sub).consecutive_failures == 3
    assert world.sub(sub).status == "active"


@pytest.mark.parametrize("rand", [0.0, 0.999])
def test_the_wait_is_jittered_within_a_tenth(world: World, rand: float) -> None:
    world.rand = rand
    world.subscribe()
    world.event()
    [claim] = world.claim()
    world.answer(claim, 500)
    wait = (world.delivery(claim.delivery.id).next_attempt_at - T0).total_seconds()
    assert 9.0 <= wait <= 11.0
    assert wait != 10.0


def test_retry_after_is_honoured_when_longer_than_the_schedule(world: World) -> None:
    world.subscribe()
    world.event()
    [claim] = world.claim()
    world.answer(claim, 503, retry_after=120)
    assert world.delivery(claim.delivery.id).next_attempt_at == T0 + timedelta(seconds=120)


def test_410_disables_the_subscription_kills_its_pending_and_says_so(world: World) -> None:
    sub = world.subscribe()
    watcher = world.subscribe(("webhook.disabled",))
    first = world.event(hold="hold_1")
    second = world.event(hold="hold_2")
    claims = world.claim()
    gone = next(c for c in claims if c.event.id == first.id)
    world.answer(gone, 410)
    disabled = world.sub(sub)
    assert disabled.status == "disabled"
    assert "410" in (disabled.disabled_reason or "")
    assert world.state_of(first) == "dead"
    assert world.state_of(second) == "dead"  # its pending delivery died with the subscription
    with world.uow() as uow:
        note = [
            e for e in uow.outbox.search(TENANT, None, None, 100) if e.type == "webhook.disabled"
        ]
        entries = uow.audit.entries(TENANT, 0, 100)
    assert [e.payload["webhook_id"] for e in note] == [sub.id]
    assert [e.action for e in entries] == ["webhook.disable"]
    assert verify_chain(entries).ok
    # The disabling event goes to the subscription that wants it, not to the disabled one.
    [claim] = [c for c in world.claim() if c.event.type == "webhook.disabled"]
    assert claim.subscription.id == watcher.id


def test_failing_for_the_whole_disable_period_disables(world: World) -> None:
    settings = RelaySettings(schedule=(0.0,) + (3600.0,) * 200, disable_after=timedelta(hours=5))
    sub = world.subscribe()
    world.event()
    for _ in range(6):
        [claim] = world.claim()
        record_results(
            world.uow(), world.clock, world.ids,
            [Result(claim.delivery.id, TENANT, world.clock.now(), Outcome(500, "status 500"))],
            settings, lambda: 0.5, audit_key=None,
        )  # fmt: skip
        if world.sub(sub).status == "disabled":
            break
        world.clock.advance(3600)
    assert world.sub(sub).status == "disabled"
    assert world.clock.now() - T0 == timedelta(hours=5)


def test_per_hold_order_one_event_in_flight_per_hold_and_subscription(world: World) -> None:
    world.subscribe()
    created = world.event(hold="hold_1", seq=1)
    committed = world.event("hold.committed", hold="hold_1", seq=2)
    other = world.event(hold="hold_2", seq=1)
    claims = world.claim()
    assert {c.event.id for c in claims} == {created.id, other.id}
    world.answer(next(c for c in claims if c.event.id == created.id), 200)
    [claim] = world.claim()
    assert claim.event.id == committed.id


def test_a_dead_earlier_event_does_not_block_the_later_ones(world: World) -> None:
    world.subscribe()
    world.event(hold="hold_1", seq=1)
    later = world.event("hold.released", hold="hold_1", seq=2)
    for wait in (0, 10, 60):
        world.clock.advance(wait)
        [claim] = world.claim()
        assert claim.event.seq == 1
        world.answer(claim, 500)
    [claim] = world.claim()
    assert claim.event.id == later.id


def test_a_success_counts_even_after_a_disabling_killed_its_delivery(world: World) -> None:
    sub = world.subscribe()
    first = world.event(hold="hold_1")
    second = world.event(hold="hold_2")
    claims = {c.event.id: c for c in world.claim()}
    world.answer(claims[first.id], 410)  # kills the second's pending delivery...
    world.answer(claims[second.id], 200)  # ...which its receiver had taken all the same
    assert world.state_of(second) == "delivered"
    assert world.sub(sub).status == "disabled"


def test_an_outcome_recorded_after_the_subscription_was_deleted_is_dropped(world: World) -> None:
    sub = world.subscribe()
    event = world.event()
    [claim] = world.claim()
    with world.uow() as uow:
        touched = uow.deliveries.remove_for_subscription(sub.id)
        uow.outbox.settle(touched, world.clock.now())
        uow.webhooks.remove(TENANT, sub.id)
        uow.commit()
    world.answer(claim, 200)
    assert world.state_of(event) == "delivered"


def test_a_full_fan_out_batch_asks_for_another_turn(world: World) -> None:
    for _ in range(FAN_OUT_BATCH + 1):
        world.event(hold=None, seq=None)
    first = claim_work(world.uow(), world.clock, world.ids, "r", 10, SETTINGS)
    second = claim_work(world.uow(), world.clock, world.ids, "r", 10, SETTINGS)
    assert (first.more, second.more, second.fanned) == (True, False, 1)


def test_delivered_events_are_purged_after_retention_and_dead_ones_kept(world: World) -> None:
    world.subscribe()
    delivered = world.event(hold="hold_1")
    dead = world.event(hold="hold_2")
    for claim in sorted(world.claim(), key=lambda c: c.event.id != delivered.id):
        world.answer(claim, 200 if claim.event.id == delivered.id else 410)
    world.clock.advance(3600)
    assert purge_delivered(world.uow(), world.clock, timedelta(hours=2), 100) == 0
    world.clock.advance(3601)  # more than the retention since it was delivered
    assert purge_delivered(world.uow(), world.clock, timedelta(hours=2), 100) == 1
    with world.uow() as uow:
        assert uow.outbox.get(TENANT, delivered.id) is None
        assert uow.outbox.get(TENANT, dead.id) is not None


def test_one_relay_lease_holder_at_a_time(world: World) -> None:
    ttl = timedelta(seconds=30)
    assert take_relay_lease(world.uow(), world.clock, "a", ttl)
    assert not take_relay_lease(world.uow(), world.clock, "b", ttl)
    world.clock.advance(20)
    assert take_relay_lease(world.uow(), world.clock, "a", ttl)  # renewed
    world.clock.advance(20)
    assert not take_relay_lease(world.uow(), world.clock, "b", ttl)
    world.clock.advance(10)
    assert take_relay_lease(world.uow(), world.clock, "b", ttl)  # a's ran out


def test_the_schedules_first_wait_delays_the_first_attempt(world: World) -> None:
    settings = RelaySettings(schedule=(30.0, 10.0), timeout=5.0)
    world.subscribe()
    world.event()
    assert claim_work(world.uow(), world.clock, world.ids, "r", 10, settings).claims == []
    world.clock.advance(30)
    assert len(claim_work(world.uow(), world.clock, world.ids, "r", 10, settings).claims) == 1


def test_a_success_in_the_same_batch_clears_the_failing_too_long_rule(world: World) -> None:
    settings = RelaySettings(schedule=(0.0,) * 10, disable_after=timedelta(hours=5))
    sub = world.subscribe()
    world.event(hold="hold_1")
    [claim] = world.claim()
    world.answer(claim, 500)  # failing since T0
    world.clock.advance(6 * 3600)
    world.event(hold="hold_2")
    claims = world.claim()
    assert len(claims) == 2
    now = world.clock.now()
    failed, ok = sorted(claims, key=lambda c: c.event.hold_id or "")
    record_results(
        world.uow(), world.clock, world.ids,
        [Result(failed.delivery.id, TENANT, now, Outcome(500, "HTTP 500")),
         Result(ok.delivery.id, TENANT, now, Outcome(200, None))],
        settings, lambda: 0.5, audit_key=None,
    )  # fmt: skip
    figures = world.sub(sub)
    assert (figures.status, figures.consecutive_failures) == ("active", 0)


def test_the_disabling_audit_entry_names_the_subscription(world: World) -> None:
    sub = world.subscribe()
    world.event()
    [claim] = world.claim()
    world.answer(claim, 410)
    with world.uow() as uow:
        [entry] = uow.audit.entries(TENANT, 0, 10)
    assert (entry.action, entry.key, entry.actor) == ("webhook.disable", sub.id, "relay")
