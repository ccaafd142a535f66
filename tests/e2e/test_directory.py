"""The per-tenant attendee directory: aliases name one attendee."""

from __future__ import annotations

from typing import Any

from tests.e2e.conftest import Server

SLOT = {"start": "2030-10-14T14:00:00Z", "duration_minutes": 30}


async def test_aliases_of_one_attendee_share_keys_and_conflicts(server: Server) -> None:
    admin = await server.key(agent="ops", role="admin")
    put = await admin.post(
        "/v1/attendees",
        {"id": "alex", "name": "Alex", "emails": ["alex@example.com", "A.Smith@Example.com"]},
    )
    assert put.status == 200
    assert put.json == {
        "id": "alex",
        "name": "Alex",
        "emails": ["a.smith@example.com", "alex@example.com"],
    }
    a = await server.key(agent="a")
    b = await server.key(agent="b")
    first = await a.create({"workflow_id": "wf", "attendees": ["alex@example.com"], **SLOT})
    assert first.json["attendees"] == ["alex"]
    # The same intent spelled with the other alias, or with the id, is a replay.
    for spelling in (["Alex Smith <a.smith@example.com>"], ["alex"]):
        again = await a.create({"workflow_id": "wf", "attendees": spelling, **SLOT})
        assert again.replayed
        assert again.body == first.body
    # Another agent using the other alias meets the same attendee.
    clash = await b.create({"workflow_id": "wf-b", "attendees": ["a.smith@example.com"], **SLOT})
    assert clash.status == 409
    assert clash.json["conflicts"][0]["attendee"] == "alex"


async def test_unknown_emails_get_a_stable_id_registered_on_first_use(server: Server) -> None:
    agent = await server.key()
    first = await agent.create({"workflow_id": "wf", "attendees": ["new@example.com"], **SLOT})
    [attendee] = first.json["attendees"]
    assert attendee.startswith("att_")
    assert server.sql("SELECT id FROM attendees") == [(attendee,)]
    assert server.sql("SELECT email, attendee_id FROM attendee_emails") == [
        ("new@example.com", attendee)
    ]
    by_id = await agent.get(f"/v1/holds?attendee={attendee}")
    by_email = await agent.get("/v1/holds?attendee=NEW@example.com")
    assert [h["id"] for h in by_id.json["items"]] == [first.json["id"]]
    assert by_email.json == by_id.json


async def test_attendees_of_two_tenants_are_apart(server: Server) -> None:
    one = await server.key(tenant="one")
    two = await server.key(tenant="two")
    body: dict[str, Any] = {"workflow_id": "wf", "attendees": ["alex@example.com"], **SLOT}
    a = (await one.create(body)).json
    b = (await two.create(body)).json
    assert a["attendees"] != b["attendees"]  # ids derive from the tenant too


async def test_an_email_in_use_cannot_move_to_another_attendee(server: Server) -> None:
    agent = await server.key(agent="a")
    admin = await server.key(agent="ops", role="admin")
    first = await agent.create({"workflow_id": "wf", "attendees": ["alex@example.com"], **SLOT})
    moved = await admin.post("/v1/attendees", {"id": "alex", "emails": ["alex@example.com"]})
    assert moved.status == 409
    assert moved.json["code"] == "email_in_use"
    assert moved.json["emails"] == ["alex@example.com"]
    # So the person stays one attendee: no double booking, and a retry replays.
    other = await (await server.key(agent="b")).create(
        {"workflow_id": "wf-2", "attendees": ["alex@example.com"], **SLOT}
    )
    assert other.status == 409
    again = await agent.create({"workflow_id": "wf", "attendees": ["alex@example.com"], **SLOT})
    assert again.replayed
    assert again.body == first.body
    # Adding a new alias to the existing attendee is fine.
    [alex] = first.json["attendees"]
    alias = await admin.post(
        "/v1/attendees", {"id": alex, "emails": ["alex@example.com", "al@example.com"]}
    )
    assert alias.status == 200
