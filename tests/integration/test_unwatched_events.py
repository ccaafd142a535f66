"""A create's event that nothing can want is written delivered; any other waits for the relay.

The relay fans each event out to the active subscriptions of its tenant, and
to the calendars bound to its hold's attendees; an event with neither is
marked delivered at once (engine/usecases/relay.py ``_fan_out``). A create
reads both in its claim lookup, after its attendees' locks (which a new
subscription or binding waits for), so when there are none its event is
written as the relay would leave it: the relay never reads it. On a real
SQLite file and a real PostgreSQL database.
"""

from __future__ import annotations

from datetime import timedelta
from functools import partial

import pytest

from slotward.engine.calendars import CalendarBinding
from slotward.engine.clock import FixedClock, TimeOrderedIds
from slotward.engine.model import OutboxEvent, Principal
from slotward.engine.ports import Store, UnitOfWork
from slotward.engine.rules.attendees import attendee_id_for_email, parse_attendees
from slotward.engine.rules.delivery import RelaySettings
from slotward.engine.rules.policy import Policy
from slotward.engine.rules.timenorm import normalize_interval
from slotward.engine.usecases.placing import HoldRequest, place_hold
from slotward.engine.usecases.relay import claim_work
from tests.contract.values import NOW, subscription

TENANT = "acme"
EMAIL = "pat@example.com"


async def _create(store: Store, n: int, *, tenant: str = TENANT) -> OutboxEvent:
    """Place a hold (its own workflow and hour); answer its stored ``hold.created``."""
    req = HoldRequest(
        principal=Principal(tenant, "agent-a", "agent", 50), workflow_id=f"wf-{n}", step=None,
        attendees=parse_attendees([EMAIL]),
        interval=normalize_interval(start=f"2030-10-14T{8 + n:02d}:00:00Z", duration_minutes=30),
        title="Sync", description=None, priority=50, ttl_seconds=300,
    )  # fmt: skip
    clock = FixedClock(NOW)
    reply = await store.write(
        partial(place_hold, req=req, policy=Policy(), clock=clock, ids=TimeOrderedIds())
    )
    assert reply.created

    def events(uow: UnitOfWork) -> list[OutboxEvent]:
        with uow:
            return uow.outbox.search(tenant, None, None, 100)

    return next(e for e in await store.read(events) if e.hold_id == reply.hold_id)


async def _relay_fans_out(store: Store) -> int:
    """How many events one relay turn fanned out."""
    clock = FixedClock(NOW + timedelta(seconds=1))
    work = await store.write(
        lambda uow: claim_work(uow, clock, TimeOrderedIds(), "relay-1", 10, RelaySettings())
    )
    return work.fanned


async def _add(store: Store, *, subscribed: str | None = None, bound: bool = False) -> None:
    def add(uow: UnitOfWork) -> None:
        with uow:
            if subscribed is not None:
                uow.webhooks.add(subscription("whk_1", tenant=subscribed))
            if bound:
                uow.directory.register(TENANT, [(attendee_id_for_email(TENANT, EMAIL), EMAIL)], NOW)
                uow.calendars.put(CalendarBinding(
                    tenant=TENANT, attendee=attendee_id_for_email(TENANT, EMAIL),
                    provider="ics", url="https://cal.example.com/pat.ics",
                    created_at=NOW, updated_at=NOW,
                ))  # fmt: skip
            uow.commit()

    await store.write(add)


async def test_with_no_subscription_and_no_calendar_the_event_is_delivered_as_written(
    either_store: Store,
) -> None:
    created = await _create(either_store, 1)
    assert (created.state, created.fanned, created.settled_at) == ("delivered", True, NOW)
    assert await _relay_fans_out(either_store) == 0  # nothing left for the relay to read


@pytest.mark.parametrize("tenant", [TENANT, "other"])
async def test_an_active_subscription_of_the_tenant_and_only_its_own_keeps_it_for_the_relay(
    either_store: Store, tenant: str
) -> None:
    await _add(either_store, subscribed=tenant)
    created = await _create(either_store, 1)
    if tenant != TENANT:  # another tenant's subscription wants none of acme's events
        assert (created.state, created.fanned) == ("delivered", True)
        return
    assert (created.state, created.fanned, created.settled_at) == ("pending", False, None)
    assert await _relay_fans_out(either_store) == 1

    def deliveries(uow: UnitOfWork) -> list[str]:
        with uow:
            return [d.event_id for d in uow.deliveries.for_event(created.id)]

    assert await either_store.read(deliveries) == [created.id]  # the relay made its delivery


async def test_a_calendar_bound_to_an_attendee_keeps_it_for_the_relay(either_store: Store) -> None:
    await _add(either_store, bound=True)
    created = await _create(either_store, 1)
    assert (created.state, created.fanned) == ("pending", False)
    assert await _relay_fans_out(either_store) == 1
