"""One mailbox is one attendee, however an agent spells its address."""

from __future__ import annotations

import unicodedata
from typing import Any

import pytest

from tests.e2e.conftest import Server

SLOT = {"start": "2030-10-14T14:00:00Z", "duration_minutes": 30}


def nfd(text: str) -> str:
    return unicodedata.normalize("NFD", text)


JOSE = "josé@bücher.example"  # typed composed (NFC), as most keyboards do
JOSE_SPELLINGS = [
    nfd(JOSE),
    "JOSÉ@BÜCHER.EXAMPLE.",
    "josé@xn--bcher-kva.example",
    nfd("José <JOSÉ@XN--BCHER-KVA.EXAMPLE.>"),
]
DIANA_SPELLINGS = ["DİANA@example.com", nfd("DİANA@example.com"), "Diana@Example.com."]


def hold(workflow: str, attendee: str, **extra: Any) -> dict[str, Any]:
    return {"workflow_id": workflow, "attendees": [attendee], **SLOT, **extra}


@pytest.mark.parametrize("spelling", JOSE_SPELLINGS)
async def test_another_spelling_meets_the_same_attendee(server: Server, spelling: str) -> None:
    first = await (await server.key(agent="a")).create(hold("wf-a", JOSE))
    assert first.status == 201
    [jose] = first.json["attendees"]
    clash = await (await server.key(agent="b")).create(hold("wf-b", spelling))
    assert clash.status == 409, clash.json
    assert clash.json["code"] == "slot_conflict"
    assert [c["attendee"] for c in clash.json["conflicts"]] == [jose]
    assert server.overlapping_pairs() == 0
    assert server.sql("SELECT count(*) FROM attendees") == [(1,)]


async def test_diana_with_a_dotted_capital_i_is_diana(server: Server) -> None:
    first = await (await server.key(agent="a")).create(hold("wf-a", "diana@example.com"))
    [diana] = first.json["attendees"]
    other = await server.key(agent="b")
    for n, spelling in enumerate(DIANA_SPELLINGS):
        clash = await other.create(hold(f"wf-{n}", spelling))
        assert clash.status == 409, (spelling, clash.json)
        assert [c["attendee"] for c in clash.json["conflicts"]] == [diana]


@pytest.mark.parametrize("spelling", JOSE_SPELLINGS)
async def test_a_retry_spelled_another_way_is_a_replay(server: Server, spelling: str) -> None:
    agent = await server.key()
    first = await agent.create(hold("wf", JOSE, step=1))
    again = await agent.create(hold("wf", spelling, step=1))
    assert again.status == 201
    assert again.replayed
    assert again.key == first.key
    assert again.body == first.body
    assert server.sql("SELECT count(*) FROM holds") == [(1,)]


async def test_the_directory_keeps_one_normal_form_per_mailbox(server: Server) -> None:
    admin = await server.key(agent="ops", role="admin")
    put = await admin.post("/v1/attendees", {"id": "jose", "emails": [JOSE, *JOSE_SPELLINGS[:3]]})
    assert put.status == 200
    assert put.json["emails"] == ["josé@xn--bcher-kva.example"]
    assert server.sql("SELECT email, attendee_id FROM attendee_emails") == [
        ("josé@xn--bcher-kva.example", "jose")
    ]
    booked = await (await server.key()).create(hold("wf", JOSE_SPELLINGS[3]))
    assert booked.json["attendees"] == ["jose"]
    found = await admin.get("/v1/holds?attendee=JOS%C3%89%40B%C3%9CCHER.EXAMPLE.")
    assert [h["id"] for h in found.json["items"]] == [booked.json["id"]]


@pytest.mark.parametrize(
    "email", ["ana@ab--c.example", "ana@xn--zz.example", "ana@x_y.example", "ana@[192.0.2.1]"]
)
async def test_a_domain_idna_2008_refuses_is_a_422_naming_the_entry(
    server: Server, email: str
) -> None:
    agent = await server.key()
    refused = await agent.create(
        {"workflow_id": "wf", "attendees": ["ok@example.com", email], **SLOT}
    )
    assert refused.status == 422
    assert refused.headers["Content-Type"].startswith("application/problem+json")
    assert refused.json["code"] == "invalid_email_domain"
    assert refused.json["field"] == "attendees"
    assert refused.json["index"] == 1
    admin = await server.key(agent="ops", role="admin")
    put = await admin.post("/v1/attendees", {"emails": [email]})
    assert put.status == 422
    assert put.json["code"] == "invalid_email_domain"
    assert server.sql("SELECT count(*) FROM holds") == [(0,)]
