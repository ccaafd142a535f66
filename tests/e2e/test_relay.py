"""The outbox relay end to end: a real server delivering to a real receiver.

The server is the production app (``bootstrap`` + ``build_app``, relay
included) on the real clock: the relay's schedule runs on real time, shortened
to fractions of a second, and its HTTP timeout is one second. The receiver
(tests/e2e/receiver.py) fails, hangs, goes away and redirects as the test
scripts it, and judges every signature with the ``standardwebhooks`` package.
Every scenario runs on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import base64
import contextlib
import time
from collections import defaultdict
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import aiohttp
from sqlalchemy import Engine

from slotward.api.bootstrap import Services, bootstrap, open_store
from slotward.api.config import Config
from slotward.api.http.app import build_app
from slotward.api.keys import create_key
from slotward.engine.model import Principal, Role
from tests.e2e.conftest import HOLD_BODY, Answer, Client, serving
from tests.e2e.receiver import (
    Arrival,
    Hang,
    Receiver,
    Reply,
    eventually,
    verifies,
    wait_until,
)
from tests.e2e.test_metrics import parse_metrics

SECRET_KEY = "e2e-relay-sealing-key-0123456789"
# Forty attempts, a fifth to two fifths of a second apart: room for a receiver
# that fails, hangs and goes away for a while before it comes back.
PATIENT = (0.0, 0.2) + (0.4,) * 38
STATES = ("pending", "delivered", "dead")


@dataclass
class Relayed:
    """A served slotward with its relay, an admin and an agent."""

    services: Services
    base: str
    admin: Client
    agent: Client

    async def subscribe(self, url: str, topics: list[str] | None = None) -> dict[str, Any]:
        made = await self.admin.post("/v1/webhooks", {"url": url, "topics": topics or ["hold.*"]})
        assert made.status == 201, made.json
        doc: dict[str, Any] = made.json
        assert doc["id"].startswith("wh_")
        assert _is_secret(doc["secret"])
        return doc

    async def webhooks(self) -> dict[str, dict[str, Any]]:
        listed = await self.admin.get("/v1/webhooks")
        assert listed.status == 200, listed.json
        return {w["id"]: w for w in listed.json["items"]}

    async def events(self, *states: str) -> list[dict[str, Any]]:
        """The outbox's events in ``states`` (all of them by default)."""
        found: list[dict[str, Any]] = []
        for state in states or STATES:
            cursor = ""
            while True:  # page by page (at most 100 a page)
                listed = await self.admin.get(f"/v1/outbox?state={state}&limit=100{cursor}")
                assert listed.status == 200, listed.json
                found += listed.json["items"]
                assert all(e["state"] == state for e in listed.json["items"])
                if not listed.json["next_cursor"]:
                    break
                cursor = f"&cursor={listed.json['next_cursor']}"
        return found

    async def event(self, event_id: str) -> dict[str, Any]:
        read = await self.admin.get(f"/v1/outbox/{event_id}")
        assert read.status == 200, read.json
        doc: dict[str, Any] = read.json
        return doc

    async def settled(self) -> bool:
        """Nothing left pending in the outbox."""
        return not await self.events("pending")

    async def hold(self, attendee: str, minute: int = 0) -> dict[str, Any]:
        body = {**HOLD_BODY, "workflow_id": f"wf-{attendee}", "attendees": [attendee],
                "start": f"2030-10-14T14:{minute:02d}:00Z"}  # fmt: skip
        made = await self.agent.create(body)
        assert made.status == 201, made.json
        doc: dict[str, Any] = made.json
        return doc

    async def commit(self, hold: dict[str, Any]) -> None:
        done = await self.agent.commit(hold["id"], hold["token"])
        assert done.status == 200, done.json

    async def release(self, hold: dict[str, Any]) -> None:
        done = await self.agent.release(hold["id"])
        assert done.status == 200, done.json


def _is_secret(secret: str) -> bool:
    return secret.startswith("whsec_") and len(base64.b64decode(secret[6:])) == 32


def relay_config(url: str, **overrides: Any) -> Config:
    settings: dict[str, Any] = {
        "db_url": url,
        "secret_key": SECRET_KEY,
        "allow_private_urls": True,
        "relay_schedule": PATIENT,
        "relay_timeout_seconds": 1.0,
        "relay_interval_seconds": 0.05,
        "rate_limit": 0.0,
    }
    return Config(**{**settings, **overrides})


@contextlib.asynccontextmanager
async def relayed(database: tuple[str, Engine], **overrides: Any) -> AsyncIterator[Relayed]:
    """The production app, relay included, on the real clock, with ``overrides``."""
    config = relay_config(database[0], **overrides)
    store = await open_store(config)
    services = await bootstrap(config, store=store)
    async with (
        serving(build_app(services, config), config) as base,
        aiohttp.ClientSession() as session,
    ):
        admin = await _key(services, session, base, "admin")
        agent = await _key(services, session, base, "agent")
        yield Relayed(services, base, admin, agent)


async def _key(svc: Services, session: aiohttp.ClientSession, base: str, role: Role) -> Client:
    principal = Principal("acme", f"{role}-1", role, 50)
    made = await svc.store.write(
        lambda uow: create_key(uow, principal, svc.clock, svc.ids, svc.keys.hasher)
    )
    return Client(session, base, made.secret)


def _at(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def _log(event: dict[str, Any]) -> list[dict[str, Any]]:
    """The attempts of an event's one delivery."""
    [delivery] = event["deliveries"]
    log: list[dict[str, Any]] = delivery["log"]
    return log


def check_bodies(arrivals: list[Arrival], events: list[dict[str, Any]]) -> None:
    """Each request is the Standard Webhooks envelope of its event, signed freshly."""
    by_id = {e["id"]: e for e in events}
    for a in arrivals:
        event = by_id[a.webhook_id]
        doc = a.doc
        assert set(doc) == {"type", "timestamp", "data"}
        assert doc["type"] == event["type"]
        assert doc["data"]["id"] == event["hold_id"]
        assert doc["data"]["sequence"] == event["seq"]
        assert {"token", "status"} <= doc["data"].keys()
        # webhook-timestamp is when the attempt was signed: fresh on each one.
        assert abs(int(a.headers["webhook-timestamp"]) - a.at) < 5


def check_order(arrivals: list[Arrival]) -> None:
    """Per hold, an event is first sent only once the one before it was delivered."""
    by_hold: dict[str, list[Arrival]] = defaultdict(list)
    for a in arrivals:
        by_hold[a.hold_id].append(a)
    for hold_id, seen in by_hold.items():
        first: dict[int, float] = {}
        delivered: dict[int, float] = {}
        for a in seen:
            first.setdefault(a.sequence, a.at)
            if a.ok:
                delivered.setdefault(a.sequence, a.at)
        seqs = sorted(first)
        assert seqs == list(range(1, len(seqs) + 1)), (hold_id, seqs)
        assert [first[s] for s in seqs] == sorted(first[s] for s in seqs), hold_id
        for s in seqs[1:]:
            assert first[s] >= delivered[s - 1], (hold_id, s)


async def test_a_failing_hanging_vanishing_receiver_gets_every_event(
    database: tuple[str, Engine],
) -> None:
    async with Receiver() as receiver, relayed(database) as app:
        receiver.script(Reply(500), Reply(500), Reply(500), Hang(1.5))
        hook = await app.subscribe(receiver.url)
        receiver.secrets.append(hook["secret"])
        holds = [await app.hold(f"room-{i}@example.com") for i in range(4)]
        for i, hold in enumerate(holds):
            await app.commit(hold)
            if i % 2:
                await app.release(hold)
        await receiver.wait_for_requests(5)
        # It goes away; what happens meanwhile must reach it once it is back.
        await receiver.stop()
        stopped = time.time()
        late = [await app.hold(f"late-{i}@example.com") for i in range(2)]
        await app.commit(late[0])

        async def refused_meanwhile() -> bool:
            pending = await app.events("pending")
            return any(
                entry["status"] is None and _at(entry["at"]) > stopped
                for e in pending for d in e["deliveries"] for entry in d["log"]
            )  # fmt: skip

        await eventually(refused_meanwhile, 20, lambda: "the relay never met the closed port")
        await receiver.start()
        await eventually(app.settled, 60, lambda: f"delivered: {len(receiver.delivered_ids())}")

        events = await app.events()
        ids = {e["id"] for e in events}
        assert len(ids) == 4 + 4 + 2 + 2 + 1  # created and committed each, 2 released; late ones
        assert {e["state"] for e in events} == {"delivered"}
        assert receiver.delivered_ids() == ids
        hooks = receiver.hooks()
        assert all(a.verified_by == (hook["secret"],) for a in hooks)
        check_bodies(hooks, events)
        check_order(hooks)
        # Retries of one event carry its one id: one webhook-id per (hold, sequence).
        keyed: dict[tuple[str, int], set[str]] = defaultdict(set)
        for a in hooks:
            keyed[(a.hold_id, a.sequence)].add(a.webhook_id)
        assert all(len(v) == 1 for v in keyed.values())
        assert len(keyed) == len(ids)
        # What the receiver answered is what the outbox recorded, attempt by attempt.
        statuses: list[int | None] = []
        for event in events:
            read = await app.event(event["id"])
            log = _log(read)
            heard = [a.answered for a in receiver.of(event["id"]) if a.answered is not None]
            assert [e["status"] for e in log if e["status"] is not None] == heard
            assert [e["n"] for e in log] == list(range(1, len(log) + 1))
            assert all(e["error"] for e in log if e["status"] is None)  # why it failed
            [delivery] = read["deliveries"]
            assert delivery["state"] == "delivered"
            assert delivery["attempts"] == len(log)
            assert delivery["subscription_id"] == hook["id"]
            statuses += [e["status"] for e in log]
        assert statuses.count(500) == 3
        assert statuses.count(None) >= 2  # the hang (a timeout) and the closed port


async def test_410_disables_the_subscription_at_once(database: tuple[str, Engine]) -> None:
    async with (
        Receiver(default=Reply(410)) as gone,
        Receiver() as witness,
        relayed(database) as app,
    ):
        doomed = await app.subscribe(gone.url)
        healthy = await app.subscribe(witness.url)
        hold = await app.hold("alex@example.com")
        await gone.wait_for_requests(1)

        async def disabled() -> bool:
            return bool((await app.webhooks())[doomed["id"]]["status"] == "disabled")

        await eventually(disabled, 10)
        listed = await app.webhooks()
        assert listed[doomed["id"]]["disabled_reason"]
        assert listed[doomed["id"]]["last_status"] == 410
        assert listed[healthy["id"]]["status"] == "active"
        await app.commit(hold)
        await eventually(app.settled, 20)
        everything = await app.events()
        # The disabling is announced too (webhook.disabled), to subscriptions that want it.
        assert "webhook.disabled" in {e["type"] for e in everything}
        events = {e["type"]: e for e in everything if e["type"].startswith("hold.")}
        assert set(events) == {"hold.created", "hold.committed"}
        await witness.wait_for(e["id"] for e in events.values())
        assert len(gone.hooks()) == 1  # the 410, tried once; nothing since
        committed = events["hold.committed"]
        assert [d["subscription_id"] for d in committed["deliveries"]] == [healthy["id"]]


async def test_a_redirect_is_a_failure_and_is_never_followed(database: tuple[str, Engine]) -> None:
    async with Receiver() as receiver, relayed(database, relay_schedule=(0.0, 0.2)) as app:
        receiver.default = Reply(302, {"Location": f"http://127.0.0.1:{receiver.port}/trap"})
        hook = await app.subscribe(receiver.url)
        await app.hold("alex@example.com")
        await eventually(lambda: _has(app, "dead"), 20)
        [event] = await app.events("dead")
        assert [e["status"] for e in _log(event)] == [302, 302]
        assert [a.answered for a in receiver.hooks()] == [302, 302]
        assert receiver.trapped() == []
        listed = (await app.webhooks())[hook["id"]]
        assert (listed["last_status"], listed["consecutive_failures"]) == (302, 2)


async def _has(app: Relayed, state: str) -> bool:
    return bool(await app.events(state))


async def test_retry_after_is_honoured(database: tuple[str, Engine]) -> None:
    async with Receiver() as receiver, relayed(database) as app:
        receiver.script(Reply(503, {"Retry-After": "1"}))
        hook = await app.subscribe(receiver.url)
        receiver.secrets.append(hook["secret"])
        await app.hold("alex@example.com")
        await eventually(app.settled, 20)
        [event] = await app.events("delivered")
        first, second = receiver.of(event["id"])
        assert (first.answered, second.answered) == (503, 200)
        # The schedule alone would have tried again after 0.2 s.
        assert second.at - first.at >= 0.95
        assert [e["status"] for e in _log(await app.event(event["id"]))] == [503, 200]


async def test_an_exhausted_event_is_dead_until_redriven(database: tuple[str, Engine]) -> None:
    async with (
        Receiver(default=Reply(500)) as receiver,
        relayed(database, relay_schedule=(0.0, 0.2, 0.2)) as app,
    ):
        hook = await app.subscribe(receiver.url)
        receiver.secrets.append(hook["secret"])
        await app.hold("alex@example.com")
        await eventually(lambda: _has(app, "dead"), 20)
        [dead] = await app.events("dead")
        [delivery] = dead["deliveries"]
        assert (delivery["state"], delivery["attempts"]) == ("dead", 3)
        assert [(e["n"], e["status"]) for e in delivery["log"]] == [(1, 500), (2, 500), (3, 500)]
        assert delivery["last_status"] == 500
        assert await app.events("pending") == []

        receiver.default = Reply(200)
        redriven = await app.admin.post(f"/v1/outbox/{dead['id']}/redrive")
        assert redriven.status == 200, redriven.json
        assert redriven.json["id"] == dead["id"]
        await receiver.wait_for([dead["id"]])
        await eventually(app.settled, 20)
        again = await app.event(dead["id"])
        assert again["state"] == "delivered"
        assert [(e["n"], e["status"]) for e in _log(again)] == [
            (1, 500), (2, 500), (3, 500), (4, 200)
        ]  # fmt: skip
        assert {a.webhook_id for a in receiver.hooks()} == {dead["id"]}
        assert all(a.verified_by == (hook["secret"],) for a in receiver.hooks())


async def test_redriving_an_unknown_or_live_event_is_refused(
    database: tuple[str, Engine],
) -> None:
    async with Receiver() as receiver, relayed(database) as app:
        await app.subscribe(receiver.url)
        await app.hold("alex@example.com")
        await eventually(app.settled, 20)
        [event] = await app.events("delivered")
        unknown = await app.admin.post("/v1/outbox/evt_nope/redrive")
        assert unknown.status == 404, unknown.json
        # An agent is not an admin: the outbox is not theirs to read or drive.
        assert (await app.agent.get("/v1/outbox?state=dead")).status == 403
        assert (await app.agent.post(f"/v1/outbox/{event['id']}/redrive")).status == 403


async def test_during_rotation_both_secrets_verify(database: tuple[str, Engine]) -> None:
    async with Receiver() as receiver, relayed(database) as app:
        hook = await app.subscribe(receiver.url)
        old = hook["secret"]
        receiver.secrets.append(old)
        hold = await app.hold("alex@example.com")
        await eventually(app.settled, 20)
        [before] = receiver.hooks()
        assert len(before.signatures) == 1
        assert before.verified_by == (old,)

        rotated = await app.admin.post(f"/v1/webhooks/{hook['id']}/rotate", {"overlap_hours": 1})
        assert rotated.status == 200, rotated.json
        new = rotated.json["secret"]
        assert _is_secret(new)
        assert new != old
        await app.commit(hold)
        await eventually(app.settled, 20)
        after = receiver.hooks()[-1]
        assert after.doc["type"] == "hold.committed"
        assert len(after.signatures) == 2
        assert all(s.startswith("v1,") for s in after.signatures)
        for secret in (old, new):  # each one alone verifies the delivery
            assert verifies(secret, after.body, after.headers)
        listing = await app.admin.get("/v1/webhooks")
        for secret in (old, new):  # neither whole nor its key part
            assert secret.encode() not in listing.body
            assert secret[6:].encode() not in listing.body


async def test_private_targets_are_refused_without_the_setting(
    database: tuple[str, Engine],
) -> None:
    async with Receiver() as receiver, relayed(database, allow_private_urls=False) as app:
        for url in (receiver.url, f"http://localhost:{receiver.port}/hook"):
            refused: Answer = await app.admin.post(
                "/v1/webhooks", {"url": url, "topics": ["hold.*"]}
            )
            assert refused.status == 422, refused.json
            assert refused.json["code"] == "url_not_allowed"
            assert "whsec_" not in refused.body.decode()
        assert await app.webhooks() == {}
        await app.hold("alex@example.com")
        await eventually(app.settled, 20)  # settled at once: no subscription to send it to
        [event] = await app.events("delivered")
        assert event["deliveries"] == []
        assert receiver.arrivals == []


async def test_each_delivery_checks_the_target_again(database: tuple[str, Engine]) -> None:
    """A URL taken once (the setting on) is refused at delivery when it no longer
    passes (the setting off, standing for DNS that now answers a private address)."""
    async with Receiver() as receiver:
        async with relayed(database) as allowed:
            await allowed.subscribe(receiver.url)
        async with relayed(database, allow_private_urls=False, relay_schedule=(0.0,)) as app:
            await app.hold("alex@example.com")
            await eventually(lambda: _has(app, "dead"), 20)
            [event] = await app.events("dead")
            [attempt] = _log(event)
            assert attempt["status"] is None
            assert attempt["error"].startswith("url_not_allowed: "), attempt
            assert "loopback" in attempt["error"], attempt
            assert receiver.arrivals == []  # never reached


async def test_the_metrics_show_the_lag_the_failures_and_the_dead(
    database: tuple[str, Engine],
) -> None:
    def value(text: str, name: str, **labels: str) -> float:
        return parse_metrics(text).get((name, frozenset(labels.items())), 0.0)

    async with (
        Receiver(default=Reply(500)) as receiver,
        relayed(database, relay_schedule=(0.0, 0.3)) as app,
    ):
        hook = await app.subscribe(receiver.url)
        await app.hold("alex@example.com")
        await eventually(lambda: _has(app, "dead"), 20)
        text = (await app.admin.get("/metrics")).body.decode()
        assert value(text, "slotward_outbox_dead") == 1
        assert value(text, "slotward_webhook_deliveries_total", outcome="failed") == 1
        assert value(text, "slotward_webhook_deliveries_total", outcome="dead") == 1
        failures = "slotward_webhook_consecutive_failures"
        assert value(text, failures, subscription=hook["id"]) == 2
        assert value(text, "slotward_outbox_lag_seconds") == 0  # dead is not waiting
        assert value(text, "slotward_relay_lease_held") == 1
        assert receiver.url not in text  # no tenant data
        assert "alex" not in text

        receiver.gate_all()  # a pending event: the lag counts from its creation
        await app.hold("blake@example.com")
        await wait_until(lambda: receiver.in_flight >= 1, 20)
        text = (await app.admin.get("/metrics")).body.decode()
        assert value(text, "slotward_outbox_lag_seconds") > 0
        assert value(text, "slotward_outbox_backlog") == 1
        receiver.release_all()


async def test_a_disabled_subscription_enabled_again_gets_its_dead_event_redriven(
    database: tuple[str, Engine],
) -> None:
    async with Receiver(default=Reply(410)) as receiver, relayed(database) as app:
        hook = await app.subscribe(receiver.url)
        await app.hold("alex@example.com")
        await eventually(lambda: _has(app, "dead"), 20)
        [dead] = await app.events("dead")
        refused = await app.admin.post(f"/v1/outbox/{dead['id']}/redrive")
        assert refused.status == 409, refused.json  # disabled: nowhere to send it
        assert refused.json["code"] == "nothing_to_redrive"

        receiver.default = Reply(200)  # the receiver is fixed
        enabled = await app.admin.post(f"/v1/webhooks/{hook['id']}/enable")
        assert enabled.status == 200, enabled.json
        assert (enabled.json["status"], enabled.json["disabled_reason"]) == ("active", None)
        assert enabled.json["consecutive_failures"] == 0
        assert "secret" not in enabled.json
        again = await app.admin.post(f"/v1/webhooks/{hook['id']}/enable")
        assert (again.status, again.json["status"]) == (200, "active")  # twice is once

        redriven = await app.admin.post(f"/v1/outbox/{dead['id']}/redrive")
        assert redriven.status == 200, redriven.json
        await receiver.wait_for([dead["id"]])
        await eventually(app.settled, 20)
        assert (await app.event(dead["id"]))["state"] == "delivered"
        audit = await app.admin.get("/v1/audit")
        actions = [(e["action"], e["key"]) for e in audit.json["items"]]
        assert ("webhook.disable", hook["id"]) in actions
        assert actions.count(("webhook.enable", hook["id"])) == 1  # the second changed nothing


async def test_a_person_is_paged_when_an_approval_is_requested(
    database: tuple[str, Engine],
) -> None:
    """approval.* events go out signed, with the approval as their data."""
    async with Receiver() as receiver, relayed(database) as app:
        hook = await app.subscribe(receiver.url, ["approval.*"])
        receiver.secrets.append(hook["secret"])
        ask = {"workflow_id": "wf-refund", "summary": "Refund order 8812",
               "evidence": {"order": 8812}}  # fmt: skip
        opened = await app.agent.post("/v1/approvals", ask)
        assert opened.status == 201, opened.json
        decided = await app.admin.post(
            f"/v1/approvals/{opened.json['id']}/decision", {"decision": "deny", "note": "no"}
        )
        assert decided.status == 200, decided.json
        await eventually(app.settled, 20)
        events = {e["type"]: e for e in await app.events("delivered")}
        assert set(events) == {"approval.requested", "approval.denied"}
        await receiver.wait_for(e["id"] for e in events.values())
        for arrival in receiver.hooks():
            assert arrival.verified_by == (hook["secret"],)  # standardwebhooks agrees
            assert verifies(hook["secret"], arrival.body, arrival.headers)
            approval = arrival.doc["data"]["approval"]
            assert approval["id"] == opened.json["id"]
            wanted = "pending" if arrival.doc["type"] == "approval.requested" else "denied"
            assert approval["status"] == wanted
