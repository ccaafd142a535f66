"""The webhook admin API over real HTTP, on both stores: subscriptions and the outbox.

A subscription's secret is answered once, by the call that made it (create or
rotate), and by no later answer; bad input is a 422 that stores nothing; only
admin keys may use it, and another tenant's objects answer 404. Deliveries and
their dead letters are the relay's (tests of their own); here the outbox is
read as the holds left it.
"""

from __future__ import annotations

import base64
from typing import Any

import pytest

from slotward.engine.codes import CODES
from slotward.engine.model import Role
from tests.e2e.conftest import Answer, Client, Server
from tests.e2e.test_openapi import conform

KEY = "k" * 32  # SLOTWARD_SECRET_KEY
OPEN = {"secret_key": KEY, "allow_private_urls": True}  # a local receiver is allowed
HOOK = {"url": "http://127.0.0.1:9/hook", "topics": ["hold.*"], "description": "ops"}
WEBHOOK_TABLES = ("webhooks", "deliveries", "delivery_attempts", "audit_log")


@pytest.fixture
async def spec(server: Server) -> dict[str, Any]:
    answer = await server.anonymous().get("/openapi.json")
    doc: dict[str, Any] = answer.json
    return doc


async def _admin(server: Server, tenant: str = "acme") -> Client:
    return await server.key(tenant=tenant, agent="ops", role="admin")


def _stored(server: Server) -> dict[str, int]:
    counts = server.table_counts()
    return {t: counts[t] for t in WEBHOOK_TABLES}


async def _delete(client: Client, path: str) -> Answer:
    return await client.request("DELETE", path)


def _refused(answer: Answer, code: str) -> None:
    assert (answer.status, answer.json["code"]) == (422, code), answer.json
    assert code in CODES


# -- subscriptions ---------------------------------------------------------------------


@pytest.mark.parametrize("config_overrides", [OPEN])
async def test_the_secret_is_shown_once_and_in_no_later_answer(
    server: Server, spec: dict[str, Any]
) -> None:
    admin = await _admin(server)
    made = await admin.post("/v1/webhooks", HOOK)
    assert made.status == 201, made.json
    doc = conform(spec, "POST", "/v1/webhooks", made)
    secret = doc["secret"]
    assert secret.startswith("whsec_")
    assert len(base64.b64decode(secret.removeprefix("whsec_"), validate=True)) == 32
    assert doc["id"].startswith("wh_")
    assert (doc["url"], doc["topics"], doc["description"]) == (
        HOOK["url"], ["hold.*"], "ops",
    )  # fmt: skip
    assert (doc["status"], doc["secrets"]) == ("active", [{"current": True, "until": None}])

    read = await admin.get(f"/v1/webhooks/{doc['id']}")
    assert conform(spec, "GET", "/v1/webhooks/{webhook_id}", read) == {
        k: v for k, v in doc.items() if k != "secret"
    }
    listed = await admin.get("/v1/webhooks")
    conform(spec, "GET", "/v1/webhooks", listed)
    rotated = await admin.post(f"/v1/webhooks/{doc['id']}/rotate", {})
    assert rotated.status == 200
    new_secret = conform(spec, "POST", "/v1/webhooks/{webhook_id}/rotate", rotated)["secret"]
    assert new_secret.startswith("whsec_")
    assert new_secret != secret
    after = [
        await admin.get(f"/v1/webhooks/{doc['id']}"),
        await admin.get("/v1/webhooks"),
        await admin.get("/v1/audit"),
    ]
    for answer in (read, listed, rotated, *after):
        assert secret.encode() not in answer.body
        assert secret.removeprefix("whsec_").encode() not in answer.body
    for answer in after:
        assert new_secret.removeprefix("whsec_").encode() not in answer.body
    # Stored only sealed: neither secret is in the database as written.
    rows = server.sql("SELECT * FROM webhooks")
    assert rows
    assert secret not in repr(rows)
    assert secret[6:] not in repr(rows)
    assert new_secret not in repr(rows)


@pytest.mark.parametrize("config_overrides", [OPEN])
async def test_subscriptions_are_listed_a_page_at_a_time(
    server: Server, spec: dict[str, Any]
) -> None:
    admin = await _admin(server)
    made = [(await admin.post("/v1/webhooks", HOOK)).json["id"] for _ in range(3)]
    first = await admin.get("/v1/webhooks?limit=2")
    page = conform(spec, "GET", "/v1/webhooks", first)
    assert [s["id"] for s in page["items"]] == made[:2]
    rest = await admin.get(f"/v1/webhooks?limit=2&cursor={page['next_cursor']}")
    assert [s["id"] for s in rest.json["items"]] == made[2:]
    assert rest.json["next_cursor"] is None
    _refused(await admin.get("/v1/webhooks?limit=0"), "invalid_field")
    _refused(await admin.get("/v1/webhooks?page=2"), "unknown_field")


@pytest.mark.parametrize("config_overrides", [OPEN])
async def test_a_rotation_keeps_the_old_secret_signing_for_the_overlap(server: Server) -> None:
    admin = await _admin(server)
    sub_id = (await admin.post("/v1/webhooks", HOOK)).json["id"]
    rotated = await admin.post(f"/v1/webhooks/{sub_id}/rotate")  # no body: 24 hours
    assert rotated.status == 200, rotated.json
    assert rotated.json["secrets"] == [
        {"current": True, "until": None},
        {"current": False, "until": "2030-10-02T09:00:00Z"},  # the server's clock + 24 h
    ]
    listed = (await admin.get("/v1/webhooks")).json["items"][0]
    assert listed["secrets"] == rotated.json["secrets"]
    short = await admin.post(f"/v1/webhooks/{sub_id}/rotate", {"overlap_hours": 0})
    # With no overlap the secret just replaced stops at once; the first still has its day.
    assert short.json["secrets"] == [
        {"current": True, "until": None},
        {"current": False, "until": "2030-10-02T09:00:00Z"},
    ]
    before = _stored(server)
    for body in ({"overlap_hours": 169}, {"overlap_hours": -1}, {"overlap_hours": "2"},
                 {"overlap_hours": 1.5}, {"overlap": 2}, [2]):  # fmt: skip
        answer = await admin.post(f"/v1/webhooks/{sub_id}/rotate", body)
        assert answer.status == 422, (body, answer.json)
    assert _stored(server) == before
    missing = await admin.post("/v1/webhooks/wh_nope/rotate", {})
    assert (missing.status, missing.json["code"]) == (404, "webhook_not_found")


@pytest.mark.parametrize("config_overrides", [OPEN])
async def test_a_deleted_subscription_is_gone(server: Server) -> None:
    admin = await _admin(server)
    sub_id = (await admin.post("/v1/webhooks", HOOK)).json["id"]
    deleted = await _delete(admin, f"/v1/webhooks/{sub_id}")
    assert (deleted.status, deleted.body) == (204, b"")
    for answer in (
        await admin.get(f"/v1/webhooks/{sub_id}"),
        await _delete(admin, f"/v1/webhooks/{sub_id}"),
        await admin.post(f"/v1/webhooks/{sub_id}/rotate", {}),
    ):
        assert (answer.status, answer.json["code"]) == (404, "webhook_not_found")
    assert (await admin.get("/v1/webhooks")).json["items"] == []
    actions = [e["action"] for e in (await admin.get("/v1/audit")).json["items"]]
    assert actions == ["webhook.create", "webhook.delete"]


@pytest.mark.parametrize("config_overrides", [OPEN])
async def test_another_tenants_subscription_is_not_found(server: Server) -> None:
    ours, theirs = await _admin(server), await _admin(server, "globex")
    their_id = (await theirs.post("/v1/webhooks", HOOK)).json["id"]
    for answer in (
        await ours.get(f"/v1/webhooks/{their_id}"),
        await ours.post(f"/v1/webhooks/{their_id}/rotate", {}),
        await _delete(ours, f"/v1/webhooks/{their_id}"),
    ):
        assert (answer.status, answer.json["code"]) == (404, "webhook_not_found")
    assert (await ours.get("/v1/webhooks")).json["items"] == []
    assert (await theirs.get(f"/v1/webhooks/{their_id}")).json["secrets"] == [
        {"current": True, "until": None}
    ]


@pytest.mark.parametrize("config_overrides", [OPEN])
async def test_only_admin_keys_may_use_it(server: Server) -> None:
    admin = await _admin(server)
    sub_id = (await admin.post("/v1/webhooks", HOOK)).json["id"]
    before = _stored(server)
    roles: tuple[Role, ...] = ("agent", "reviewer")
    for role in roles:
        key = await server.key(agent=role, role=role)
        for answer in (
            await key.post("/v1/webhooks", HOOK),
            await key.get("/v1/webhooks"),
            await key.get(f"/v1/webhooks/{sub_id}"),
            await key.post(f"/v1/webhooks/{sub_id}/rotate", {}),
            await _delete(key, f"/v1/webhooks/{sub_id}"),
            await key.get("/v1/outbox"),
            await key.get("/v1/outbox/evt_x"),
            await key.post("/v1/outbox/evt_x/redrive"),
        ):
            assert (answer.status, answer.json["code"]) == (403, "role_forbidden"), role
    assert _stored(server) == before
    assert (await server.anonymous().get("/v1/webhooks")).status == 401


BAD_BODIES: list[tuple[dict[str, Any] | list[Any], str]] = [
    ({**HOOK, "url": "not a url"}, "invalid_url"),
    ({**HOOK, "url": "ftp://127.0.0.1/hook"}, "invalid_url"),
    ({**HOOK, "url": "http://user:pass@127.0.0.1/hook"}, "invalid_url"),
    ({**HOOK, "url": "/relative/hook"}, "invalid_url"),
    ({**HOOK, "url": ""}, "invalid_field"),
    ({**HOOK, "url": 42}, "invalid_field"),
    ({**HOOK, "topics": ["hold.created", "hold.booked"]}, "invalid_topic"),
    ({**HOOK, "topics": ["nothing.*"]}, "invalid_topic"),
    ({**HOOK, "topics": []}, "invalid_field"),
    ({**HOOK, "topics": "hold.*"}, "invalid_field"),
    ({**HOOK, "topics": [1]}, "invalid_field"),
    ({**HOOK, "description": "x" * 501}, "invalid_field"),
    ({**HOOK, "description": 7}, "invalid_field"),
    ({**HOOK, "secret": "whsec_mine"}, "unknown_field"),
    ({"topics": ["hold.*"]}, "missing_field"),
    ({"url": HOOK["url"]}, "missing_field"),
    ([HOOK], "invalid_body"),
]


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
@pytest.mark.parametrize("config_overrides", [OPEN])
async def test_bad_input_is_refused_and_nothing_is_stored(server: Server) -> None:
    admin = await _admin(server)
    before = _stored(server)
    for body, code in BAD_BODIES:
        answer = await admin.post("/v1/webhooks", body)
        assert (answer.status, answer.json["code"]) == (422, code), (body, answer.json)
        assert "secret" not in answer.json
    assert _stored(server) == before
    assert (await admin.post("/v1/webhooks", {**HOOK, "description": "x" * 500})).status == 201


@pytest.mark.parametrize("config_overrides", [{"secret_key": KEY}])
async def test_private_targets_are_refused_by_default(server: Server) -> None:
    admin = await _admin(server)
    before = _stored(server)
    for url in ("http://127.0.0.1/hook", "http://localhost:8080/hook", "https://10.0.0.1/",
                "http://[::1]/hook", "http://169.254.169.254/latest/meta-data"):  # fmt: skip
        answer = await admin.post("/v1/webhooks", {**HOOK, "url": url})
        _refused(answer, "url_not_allowed")
    assert _stored(server) == before


@pytest.mark.parametrize("database", ["sqlite"], indirect=True)
@pytest.mark.parametrize("config_overrides", [OPEN])
async def test_the_metadata_address_is_refused_even_with_private_targets_allowed(
    server: Server,
) -> None:
    admin = await _admin(server)
    before = _stored(server)
    for url in ("http://169.254.169.254/latest/meta-data", "http://0.0.0.0/hook"):
        _refused(await admin.post("/v1/webhooks", {**HOOK, "url": url}), "url_not_allowed")
    assert _stored(server) == before


@pytest.mark.parametrize("config_overrides", [{"allow_private_urls": True}])
async def test_without_a_secret_key_nothing_is_subscribed(server: Server) -> None:
    admin = await _admin(server)
    before = _stored(server)
    answer = await admin.post("/v1/webhooks", HOOK)
    _refused(answer, "secret_key_required")
    assert "SLOTWARD_SECRET_KEY" in answer.json["detail"]
    assert _stored(server) == before


# -- the outbox ------------------------------------------------------------------------


@pytest.mark.parametrize("config_overrides", [OPEN])
async def test_the_outbox_lists_the_tenants_events(
    server: Server, spec: dict[str, Any], hold_body: dict[str, Any]
) -> None:
    admin, theirs = await _admin(server), await _admin(server, "globex")
    agent = await server.key()
    other_agent = await server.key(tenant="globex")
    held = (await agent.create(hold_body)).json
    await agent.commit(held["id"], held["token"])
    await agent.create({**hold_body, "workflow_id": "wf-2", "start": "2030-10-15T10:00:00Z"})
    await other_agent.create(hold_body)

    listed = await admin.get("/v1/outbox")
    page = conform(spec, "GET", "/v1/outbox", listed)
    events = page["items"]
    assert [(e["type"], e["seq"]) for e in events] == [
        ("hold.created", 1), ("hold.committed", 2), ("hold.created", 1),
    ]  # fmt: skip
    assert events[0]["hold_id"] == events[1]["hold_id"] == held["id"]
    assert page["next_cursor"] is None
    theirs_listed = (await theirs.get("/v1/outbox")).json["items"]
    assert len(theirs_listed) == 1
    assert not {e["id"] for e in theirs_listed} & {e["id"] for e in events}

    for state in ("pending", "delivered", "dead"):
        only = (await admin.get(f"/v1/outbox?state={state}")).json["items"]
        assert all(e["state"] == state for e in only), state
        assert {e["id"] for e in only} <= {e["id"] for e in events}
    assert (await admin.get("/v1/outbox?state=dead")).json["items"] == []
    _refused(await admin.get("/v1/outbox?state=lost"), "invalid_field")
    _refused(await admin.get("/v1/outbox?limit=101"), "invalid_field")

    first = await admin.get("/v1/outbox?limit=2")
    assert [e["id"] for e in first.json["items"]] == [e["id"] for e in events[:2]]
    rest = await admin.get(f"/v1/outbox?limit=2&cursor={first.json['next_cursor']}")
    assert [e["id"] for e in rest.json["items"]] == [events[2]["id"]]

    one = await admin.get(f"/v1/outbox/{events[0]['id']}")
    assert conform(spec, "GET", "/v1/outbox/{event_id}", one)["id"] == events[0]["id"]
    for answer in (
        await admin.get("/v1/outbox/evt_nope"),
        await admin.get(f"/v1/outbox/{theirs_listed[0]['id']}"),
        await admin.post(f"/v1/outbox/{theirs_listed[0]['id']}/redrive"),
        await admin.post("/v1/outbox/evt_nope/redrive"),
    ):
        assert (answer.status, answer.json["code"]) == (404, "event_not_found")


@pytest.mark.parametrize("config_overrides", [OPEN])
async def test_an_event_with_nothing_dead_is_not_redriven(
    server: Server, spec: dict[str, Any], hold_body: dict[str, Any]
) -> None:
    admin, agent = await _admin(server), await server.key()
    await agent.create(hold_body)
    [event] = (await admin.get("/v1/outbox")).json["items"]
    before = _stored(server)
    answer = await admin.post(f"/v1/outbox/{event['id']}/redrive")
    assert (answer.status, answer.json["code"]) == (409, "nothing_to_redrive")
    conform(spec, "POST", "/v1/outbox/{event_id}/redrive", answer)
    assert "no dead delivery" in answer.json["detail"]
    assert _stored(server) == before
