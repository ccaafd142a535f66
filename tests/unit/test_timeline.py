"""The dashboard's reads on the fakes: the timeline (engine/usecases/timeline.py) and the
busiest workflows, through the services (api/dashboard.py) as the HTTP handlers call them.

Holds are placed, committed, released and preempted through the services;
a calendar binding and its mirror are stored as the sync worker leaves them.
Time moves only when a test advances the clock.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from slotward.api import service
from slotward.api.bootstrap import Services, bootstrap
from slotward.api.config import Config
from slotward.engine.calendars import BusyBlock, CalendarBinding
from slotward.engine.clock import FixedClock
from slotward.engine.errors import SlotwardError
from slotward.engine.fakes import InMemoryStore, SequentialIds
from slotward.engine.model import Principal, Reply
from slotward.engine.rules.attendees import attendee_id_for_email
from slotward.engine.usecases import timeline as timeline_module

T0 = datetime(2030, 10, 1, 9, 0, tzinfo=UTC)
ALICE = Principal("acme", "alice", "agent", 50)
BOSS = Principal("acme", "boss", "agent", 90)
READER = Principal("acme", "rev", "reviewer", 0)
STRANGER = Principal("globex", "x", "agent", 50)
DAY = {"from": "2030-10-02T00:00:00Z", "to": "2030-10-03T00:00:00Z"}


@pytest.fixture
async def svc() -> Services:
    return await bootstrap(
        Config(), store=InMemoryStore(), clock=FixedClock(T0), ids=SequentialIds()
    )


def _state(svc: Services) -> Any:
    assert isinstance(svc.store, InMemoryStore)
    return svc.store.state


def _doc(reply: Reply) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(reply.body)
    return doc


async def _hold(
    svc: Services, who: Principal, attendees: list[str], start: str, wf: str, **more: Any
) -> dict[str, Any]:
    fields = {"attendees": attendees, "start": start, "duration_minutes": 30, **more}
    reply = await service.create_hold(svc, who, fields, workflow_id=wf, step=None, client_key=None)
    assert reply.created, reply.body
    return _doc(reply)


def _id(email: str) -> str:
    return attendee_id_for_email("acme", email)


def _bind(svc: Services, email: str, blocks: list[tuple[str, str]]) -> None:
    """A binding read once at T0, and the mirror that read left."""
    state, attendee = _state(svc), _id(email)
    state.bindings[("acme", attendee)] = CalendarBinding(
        tenant="acme", attendee=attendee, provider="ics", url="https://cal.example.com/a.ics",
        created_at=T0, updated_at=T0, status="ok", synced_at=T0,
    )  # fmt: skip
    state.busy[("acme", attendee)] = [
        BusyBlock("acme", attendee, f"src-{n}", _at(s), _at(e)) for n, (s, e) in enumerate(blocks)
    ]


def _at(stamp: str) -> datetime:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00"))


async def test_every_status_is_on_its_attendees_rows_with_the_external_time(
    svc: Services,
) -> None:
    held = await _hold(svc, ALICE, ["alex@example.com"], "2030-10-02T10:00:00Z", "wf-1")
    both = await _hold(svc, ALICE, ["alex@example.com", "sam@example.com"],
                       "2030-10-02T11:00:00Z", "wf-2")  # fmt: skip
    await service.commit(svc, ALICE, both["id"], both["token"], None)
    gone = await _hold(svc, ALICE, ["sam@example.com"], "2030-10-02T12:00:00Z", "wf-3")
    await service.release(svc, ALICE, gone["id"], None)
    low = await _hold(svc, ALICE, ["kim@example.com"], "2030-10-02T13:00:00Z", "wf-4")
    high = await _hold(svc, BOSS, ["kim@example.com"], "2030-10-02T13:15:00Z", "wf-5")
    brief = await _hold(svc, ALICE, ["kim@example.com"], "2030-10-02T15:00:00Z", "wf-6",
                        hold_ttl_seconds=10)  # fmt: skip
    await _hold(svc, STRANGER, ["alex@example.com"], "2030-10-02T10:00:00Z", "wf-x")
    _bind(svc, "alex@example.com", [("2030-10-02T08:00:00Z", "2030-10-02T09:00:00Z"),
                                    ("2030-10-02T08:30:00Z", "2030-10-02T09:30:00Z"),
                                    ("2030-10-03T08:00:00Z", "2030-10-03T09:00:00Z")])  # fmt: skip
    svc.clock.advance(60)  # type: ignore[attr-defined]  # the brief hold has expired, unswept

    doc = await service.timeline(svc, READER, DAY, [])
    assert (doc["from"], doc["to"], doc["truncated"]) == (DAY["from"], DAY["to"], False)
    rows = {row["id"]: row for row in doc["attendees"]}
    assert list(rows) == sorted(rows) == sorted(_id(e) for e in ("alex@example.com",
                                                "sam@example.com", "kim@example.com"))  # fmt: skip

    def seen(email: str) -> list[tuple[str, str]]:
        return [(h["id"], h["status"]) for h in rows[_id(email)]["holds"]]

    assert seen("alex@example.com") == [(held["id"], "held"), (both["id"], "committed")]
    assert seen("sam@example.com") == [(both["id"], "committed"), (gone["id"], "released")]
    assert seen("kim@example.com") == [
        (low["id"], "preempted"), (high["id"], "held"), (brief["id"], "expired"),
    ]  # fmt: skip
    kim = rows[_id("kim@example.com")]
    assert kim["holds"][0]["preempted_by"] == high["id"]
    assert kim["holds"][1] == (await service.get_hold(svc, READER, high["id"]))  # as GET shows
    alex = rows[_id("alex@example.com")]
    assert alex["external"] == [{"start": "2030-10-02T08:00:00Z", "end": "2030-10-02T09:30:00Z"}]
    assert (alex["external_as_of"], alex["calendar"]) == ("2030-10-01T09:00:00Z", "ok")
    assert alex["emails"] == ["alex@example.com"]  # registered by the first claim
    assert (kim["external"], kim["external_as_of"], kim["calendar"]) == ([], None, None)


async def test_a_hold_begun_before_the_window_is_on_it_and_one_over_before_is_not(
    svc: Services,
) -> None:
    early = {"attendees": ["alex@example.com"], "start": "2030-10-01T23:00:00Z",
             "end": "2030-10-02T01:00:00Z"}  # fmt: skip
    over = {"attendees": ["sam@example.com"], "start": "2030-10-01T22:00:00Z",
            "end": "2030-10-02T00:00:00Z"}  # fmt: skip
    spanning = await service.create_hold(svc, ALICE, early, workflow_id="a", step=None,
                                         client_key=None)  # fmt: skip
    await service.create_hold(svc, ALICE, over, workflow_id="b", step=None, client_key=None)
    doc = await service.timeline(svc, READER, DAY, [])
    [row] = doc["attendees"]  # sam's hold ended as the window began: no row
    assert [h["id"] for h in row["holds"]] == [_doc(spanning)["id"]]


async def test_asked_attendees_have_rows_without_holds_and_others_keep_theirs(
    svc: Services,
) -> None:
    await service.put_attendee(
        svc, Principal("acme", "ops", "admin", 0),
        {"id": "room-1", "name": "Room One", "emails": ["room1@example.com"]},
    )  # fmt: skip
    held = await _hold(svc, ALICE, ["alex@example.com"], "2030-10-02T10:00:00Z", "wf-1")
    asked = ["room1@example.com", "New Person <nobody@example.com>"]
    doc = await service.timeline(svc, READER, DAY, asked)
    rows = {row["id"]: row for row in doc["attendees"]}
    assert set(rows) == {"room-1", _id("nobody@example.com"), _id("alex@example.com")}
    room = rows["room-1"]
    assert (room["name"], room["emails"]) == ("Room One", ["room1@example.com"])
    nobody = rows[_id("nobody@example.com")]
    assert (nobody["name"], nobody["emails"], nobody["holds"]) == (None, [], [])
    assert [h["id"] for h in rows[_id("alex@example.com")]["holds"]] == [held["id"]]
    assert _state(svc).attendees.get(("acme", _id("nobody@example.com"))) is None  # a read


@pytest.mark.parametrize(
    ("fields", "code"),
    [
        ({"from": DAY["to"], "to": DAY["from"]}, "invalid_interval"),
        ({"from": DAY["from"], "to": DAY["from"]}, "invalid_interval"),
        ({"from": "2030-10-01T00:00:00Z", "to": "2030-10-15T00:00:01Z"}, "window_too_long"),
        ({"from": "2030-10-02T00:00:00", "to": DAY["to"]}, "naive_datetime"),
        ({"from": "tomorrow", "to": DAY["to"]}, "invalid_datetime"),
        (
            {
                "from": "2030-10-02T00:00:00",
                "to": "2030-10-03T00:00:00",
                "timezone": "Mars/Olympus",
            },
            "unknown_timezone",
        ),
    ],
)
async def test_a_bad_window_is_refused(svc: Services, fields: dict[str, str], code: str) -> None:
    with pytest.raises(SlotwardError) as caught:
        await service.timeline(svc, READER, fields, [])
    assert caught.value.code == code


async def test_fourteen_days_in_wall_time_are_allowed(svc: Services) -> None:
    fields = {"from": "2030-10-01T00:00:00", "to": "2030-10-15T00:00:00",
              "timezone": "Europe/Berlin"}  # fmt: skip
    doc = await service.timeline(svc, READER, fields, [])
    assert (doc["from"], doc["to"]) == ("2030-09-30T22:00:00Z", "2030-10-14T22:00:00Z")


async def test_a_window_with_more_than_one_answer_shows_is_truncated_latest_first_out(
    svc: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(timeline_module, "MAX_HOLDS", 3)
    monkeypatch.setattr(timeline_module, "MAX_PLACEMENTS", 4)
    starts = [f"2030-10-02T{h:02d}:00:00Z" for h in (10, 11, 12, 13)]
    made = [await _hold(svc, ALICE, ["alex@example.com"], s, f"wf-{s}") for s in starts]
    doc = await service.timeline(svc, READER, DAY, [])
    assert doc["truncated"] is True
    assert [h["id"] for h in doc["attendees"][0]["holds"]] == [h["id"] for h in made[:3]]
    pair = ["a@example.com", "b@example.com"]  # two placements per hold
    await _hold(svc, ALICE, pair, "2030-10-02T09:00:00Z", "wf-pair-1")
    await _hold(svc, ALICE, pair, "2030-10-02T09:30:00Z", "wf-pair-2")
    doc = await service.timeline(svc, READER, DAY, [])
    placed = [h["start"] for row in doc["attendees"] for h in row["holds"]]
    assert doc["truncated"] is True
    assert sorted(placed) == ["2030-10-02T09:00:00Z"] * 2 + ["2030-10-02T09:30:00Z"] * 2


async def test_the_busiest_workflows_come_first_with_this_processs_unflushed_replays(
    svc: Services,
) -> None:
    starts = {"wf-quiet": "10", "wf-busy": "11", "wf-also": "12"}
    for wf, replays in (("wf-quiet", 1), ("wf-busy", 3), ("wf-also", 1)):
        for _ in range(replays + 1):  # the first answer, then its replays
            await _hold(svc, ALICE, ["alex@example.com"], f"2030-10-02T{starts[wf]}:00:00Z", wf)
    await svc.storms.flush()
    for _ in range(2):  # seen by this process, not yet handed to the store
        await _hold(svc, ALICE, ["alex@example.com"], "2030-10-02T10:00:00Z", "wf-quiet")
    doc = await service.busiest_workflows(svc, READER, 50)
    assert doc["next_cursor"] is None
    assert [(w["workflow_id"], w["replays"]) for w in doc["items"]] == [
        ("wf-busy", 3), ("wf-quiet", 3), ("wf-also", 1),
    ]  # fmt: skip
    assert doc["items"][0] == {"workflow_id": "wf-busy", "replays": 3,
                               "last_replay_at": "2030-10-01T09:00:00Z", "storms": 0,
                               "storm_at": None}  # fmt: skip
    assert [w["workflow_id"] for w in (await service.busiest_workflows(svc, READER, 1))["items"]]
    assert (await service.busiest_workflows(svc, STRANGER, 50))["items"] == []
