"""The relay worker (api/workers/relay.py) over the in-memory store, to a real receiver.

The receiver is a plain aiohttp app on 127.0.0.1; every request it gets is
verified with the ``standardwebhooks`` package, an implementation that is not
ours. The store is the fake so turns can be driven one by one; the same worker
on SQLite and PostgreSQL, inside real servers, is tests/e2e/test_relay*.py.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import standardwebhooks
from aiohttp import web
from aiohttp.test_utils import TestServer

from slotward.adapters.webhooks.sender import WebhookSender
from slotward.api.bootstrap import Services, bootstrap
from slotward.api.config import Config
from slotward.api.workers.relay import Relay, webhook_body
from slotward.engine.clock import FixedClock, SystemClock
from slotward.engine.fakes import InMemoryStore, SequentialIds
from slotward.engine.model import OutboxEvent, SealedSecret, Subscription
from slotward.engine.rules.delivery import RelaySettings
from slotward.engine.rules.signing import new_secret
from slotward.engine.rules.timenorm import format_instant

# Each test's clock starts at the wall clock's now, read when the test starts (not
# when the module is collected, minutes earlier in a whole run): standardwebhooks
# checks webhook-timestamp against its own clock, within five minutes.
T0 = datetime(2030, 10, 1, 9, 0, tzinfo=UTC)  # only where no receiver verifies
TENANT = "acme"
SECRET = new_secret(bytes(range(32)))
OLD_SECRET = new_secret(bytes(range(1, 33)))
SETTINGS = RelaySettings(schedule=(0.0, 1.0), timeout=2.0)


@dataclass
class Receiver:
    url: str
    statuses: list[int] = field(default_factory=list)  # answered in turn, then 200
    got: list[tuple[dict[str, str], bytes]] = field(default_factory=list)


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    box: list[Receiver] = []

    async def handle(request: web.Request) -> web.Response:
        body = await request.read()
        box[0].got.append((dict(request.headers), body))
        status = box[0].statuses.pop(0) if box[0].statuses else 200
        return web.Response(status=status)

    app = web.Application()
    app.router.add_post("/hook", handle)
    server = TestServer(app, host="127.0.0.1")
    await server.start_server()
    box.append(Receiver(f"http://127.0.0.1:{server.port}/hook"))
    yield box[0]
    await server.close()


@dataclass
class Rig:
    svc: Services
    clock: FixedClock
    sender: WebhookSender

    def relay(self, *, exclusive: bool = False, owner: str | None = None) -> Relay:
        return Relay(self.svc, self.sender, SETTINGS, exclusive=exclusive, owner=owner)

    async def subscribe(
        self, url: str, secrets: tuple[tuple[str, datetime | None], ...] = ((SECRET, None),)
    ) -> Subscription:
        sub_id = self.svc.ids.new_id("wh")
        sealed = tuple(SealedSecret(self.svc.box.seal(s, sub_id), until) for s, until in secrets)
        sub = Subscription(
            id=sub_id, tenant=TENANT, url=url, topics=("hold.*",), description=None,
            status="active", secrets=sealed, created_at=self.clock.now(),
            updated_at=self.clock.now(),
        )  # fmt: skip

        def add(uow: Any) -> None:
            with uow:
                uow.webhooks.add(sub)
                uow.commit()

        await self.svc.store.write(add)
        return sub

    async def emit(self, hold: str, seq: int, kind: str = "hold.created") -> OutboxEvent:
        doc = {"id": hold, "token": seq, "status": "held"}
        event = OutboxEvent(
            self.svc.ids.new_id("evt"), TENANT, kind, self.clock.now(), {"hold": doc}, hold, seq=seq
        )

        def add(uow: Any) -> None:
            with uow:
                uow.outbox.add(event)
                uow.commit()

        await self.svc.store.write(add)
        return event

    async def state(self, event: OutboxEvent) -> str:
        def get(uow: Any) -> str:
            with uow:
                found = uow.outbox.get(TENANT, event.id)
                assert found is not None
                return str(found.state)

        return await self.svc.store.read(get)


@pytest.fixture
async def rig() -> AsyncIterator[Rig]:
    clock = FixedClock(SystemClock().now().replace(microsecond=0))
    config = Config(secret_key="k" * 32, allow_private_urls=True)
    svc = await bootstrap(config, store=InMemoryStore(), clock=clock, ids=SequentialIds())
    sender = WebhookSender(allow_private=True, timeout=SETTINGS.timeout)
    yield Rig(svc, clock, sender)
    await sender.close()


async def drain(relay: Relay, turns: int = 20) -> None:
    """Turn until nothing is in flight or waiting to be recorded."""
    for _ in range(turns):
        await relay.turn()
        if not relay.busy:
            await relay.turn()  # record the last outcomes
            return
        await relay.settle()
    raise AssertionError("the relay did not come to rest")


async def test_events_arrive_signed_in_order_and_verify_with_standardwebhooks(
    rig: Rig, receiver: Receiver
) -> None:
    await rig.subscribe(receiver.url)
    created = await rig.emit("hold_1", 1)
    committed = await rig.emit("hold_1", 2, "hold.committed")
    relay = rig.relay()
    await drain(relay)
    await drain(relay)
    assert [h["webhook-id"] for h, _ in receiver.got] == [created.id, committed.id]
    for headers, body in receiver.got:
        standardwebhooks.Webhook(SECRET).verify(body, headers)  # raises if wrong
        doc = json.loads(body)
        assert set(doc) == {"type", "timestamp", "data"}
    bodies = [json.loads(b) for _, b in receiver.got]
    assert [(b["type"], b["data"]["sequence"]) for b in bodies] == [
        ("hold.created", 1),
        ("hold.committed", 2),
    ]
    assert bodies[0]["data"]["token"] == 1
    assert await rig.state(committed) == "delivered"


async def test_a_failure_is_sent_again_with_the_same_id_and_body(
    rig: Rig, receiver: Receiver
) -> None:
    receiver.statuses = [500]
    await rig.subscribe(receiver.url)
    event = await rig.emit("hold_1", 1)
    relay = rig.relay()
    await drain(relay)
    assert await rig.state(event) == "pending"
    rig.clock.advance(1.2)  # past the second wait, jitter included
    await drain(relay)
    assert await rig.state(event) == "delivered"
    (first, body1), (second, body2) = receiver.got
    assert first["webhook-id"] == second["webhook-id"] == event.id
    assert body1 == body2


async def test_during_rotation_both_secrets_sign(rig: Rig, receiver: Receiver) -> None:
    until = rig.clock.now() + timedelta(days=1)
    await rig.subscribe(receiver.url, ((SECRET, None), (OLD_SECRET, until)))
    await rig.emit("hold_1", 1)
    await drain(rig.relay())
    [(headers, body)] = receiver.got
    assert len(headers["webhook-signature"].split(" ")) == 2
    for secret in (SECRET, OLD_SECRET):
        standardwebhooks.Webhook(secret).verify(body, headers)


async def test_a_rotated_out_secret_stops_signing_after_its_overlap(
    rig: Rig, receiver: Receiver
) -> None:
    await rig.subscribe(receiver.url, ((SECRET, None), (OLD_SECRET, rig.clock.now())))
    await rig.emit("hold_1", 1)
    await drain(rig.relay())
    [(headers, body)] = receiver.got
    assert len(headers["webhook-signature"].split(" ")) == 1
    standardwebhooks.Webhook(SECRET).verify(body, headers)
    with pytest.raises(standardwebhooks.WebhookVerificationError):
        standardwebhooks.Webhook(OLD_SECRET).verify(body, headers)


async def test_one_exclusive_relay_at_a_time(rig: Rig, receiver: Receiver) -> None:
    await rig.subscribe(receiver.url)
    event = await rig.emit("hold_1", 1)
    first = rig.relay(exclusive=True, owner="first")
    second = rig.relay(exclusive=True, owner="second")
    await first.turn()
    assert first.lease_held
    await second.turn()
    assert not second.lease_held
    await drain(first)
    await drain(second)
    assert [h["webhook-id"] for h, _ in receiver.got] == [event.id]
    rig.clock.advance(SETTINGS.lease.total_seconds())  # first stopped renewing: it died
    await second.turn()
    assert second.lease_held


def test_webhook_body_of_an_event_of_no_hold() -> None:
    from slotward.engine.model import Claim, Delivery

    event = OutboxEvent("evt_1", TENANT, "workflow.retry_storm", T0, {"workflow_id": "wf"})
    sub = Subscription(
        id="wh_1", tenant=TENANT, url="https://x.example/", topics=("workflow.*",),
        description=None, status="active", secrets=(), created_at=T0, updated_at=T0,
    )  # fmt: skip
    delivery = Delivery(
        id="dlv_1", event_id="evt_1", subscription_id="wh_1", tenant=TENANT, hold_id=None,
        seq=None, state="pending", attempts=0, next_attempt_at=T0, created_at=T0,
    )  # fmt: skip
    body = json.loads(webhook_body(Claim(delivery, event, sub)))
    assert body == {
        "type": "workflow.retry_storm",
        "timestamp": format_instant(T0),
        "data": {"workflow_id": "wf"},
    }
