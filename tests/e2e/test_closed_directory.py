"""A deployment that forbids unknown attendees (SLOTWARD_ALLOW_UNKNOWN_ATTENDEES=false)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.conftest import Server


@pytest.fixture
def config_overrides() -> dict[str, Any]:
    return {"allow_unknown_attendees": False}


async def test_unknown_attendees_are_refused_and_known_ones_book(server: Server) -> None:
    agent = await server.key()
    body = {"workflow_id": "wf", "start": "2030-10-14T14:00:00Z", "duration_minutes": 30}
    refused = await agent.create({**body, "attendees": ["stranger@example.com"]})
    assert refused.status == 422
    assert refused.json["code"] == "unknown_attendee"
    assert server.counts()["attendees"] == 0
    assert server.counts()["ledger"] == 0
    admin = await server.key(agent="ops", role="admin")
    await admin.post("/v1/attendees", {"id": "sam", "emails": ["sam@example.com"]})
    booked = await agent.create({**body, "attendees": ["Sam@example.com", "sam"]})
    assert booked.status == 201
    assert booked.json["attendees"] == ["sam"]
