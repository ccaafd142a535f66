"""The Python client against a real `slotward serve` process, as a user runs both.

One server for the module (each test books its own attendees and workflows);
the calls, their typed answers and the errors an agent acts on.
"""

from __future__ import annotations

import asyncio
import logging
import traceback
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import aiohttp
import pytest

from slotward.api.client import (
    HoldLost,
    SlotConflict,
    Slotward,
    SlotwardError,
    SyncSlotward,
    Unreachable,
)
from slotward.engine.tools import CREATE_HOLD, FIND_FREE_SLOTS
from tests.e2e.served import Served, slotward_serve
from tests.e2e.test_cli import _free_port


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with slotward_serve(tmp_path_factory.mktemp("client"), {}, demo_key=True) as running:
        yield running


@pytest.fixture
def key(served: Served) -> str:
    assert served.secret is not None
    return served.secret


async def test_a_hold_lands_once_and_a_reworded_retry_replays_it(served: Served, key: str) -> None:
    async with Slotward(served.base, key) as sw:
        first = await sw.create_hold(
            workflow_id="wf-replay", step=3, attendees=["alex@example.com"],
            start="2030-10-14T14:00:00Z", duration_minutes=30, title="Strategy Sync with Alex",
            agent_thought="book it",
        )  # fmt: skip
        again = await sw.create_hold(
            workflow_id="wf-replay", step=3, attendees=["Alex@Example.com "],
            start="2030-10-14T16:00:00+02:00", end="2030-10-14T16:30:00+02:00",
            title="Alex / Strategy Sync",
        )  # fmt: skip
    assert (first.replayed, first.status, first.token) == (False, "held", 1)
    assert (first.start, first.end) == ("2030-10-14T14:00:00Z", "2030-10-14T14:30:00Z")
    assert again.replayed
    assert (again.id, again.idempotency_key, again.raw) == (first.id, first.key, first.raw)
    assert again.status_now == "held"


async def test_a_taken_slot_is_a_slot_conflict_whose_alternative_lands(
    served: Served, key: str
) -> None:
    slot: dict[str, Any] = {
        "attendees": ["bo@example.com"],
        "start": "2030-10-15T10:00:00Z",
        "duration_minutes": 30,
    }
    async with Slotward(served.base, key) as sw:
        await sw.create_hold(workflow_id="wf-bo-1", **slot)
        with pytest.raises(SlotConflict) as taken:
            await sw.create_hold(workflow_id="wf-bo-2", **slot)
        conflict = taken.value
        assert (conflict.status, conflict.code, conflict.retryable) == (409, "slot_conflict", True)
        assert [c.kind for c in conflict.conflict_entries] == ["held"]
        assert conflict.same_intent  # the same attendees and times, another workflow
        assert conflict.retry_after is not None
        assert 1 <= len(conflict.alternatives) <= 3
        choice = conflict.alternative_slots[0]
        assert choice.start is not None
        assert choice.end is not None
        span = datetime.fromisoformat(choice.end) - datetime.fromisoformat(choice.start)
        assert span.total_seconds() == 30 * 60
        hold = await sw.create_hold(
            workflow_id="wf-bo-2", attendees=slot["attendees"], start=choice.start, end=choice.end
        )
    assert (hold.status, hold.start) == ("held", choice.start)


async def test_commit_release_and_get_answer_the_hold_as_it_is(served: Served, key: str) -> None:
    async with Slotward(served.base, key) as sw:
        kept = await sw.create_hold(
            workflow_id="wf-life", step=1, attendees=["cy@example.com"],
            start="2030-10-16T09:00:00Z", duration_minutes=45,
        )  # fmt: skip
        assert kept.token is not None
        committed = await sw.commit_hold(kept.id, kept.token)
        assert (committed.status, committed.replayed) == ("committed", False)
        assert (await sw.commit_hold(kept.id, kept.token)).replayed
        assert (await sw.get_hold(kept.id)).status == "committed"
        dropped = await sw.create_hold(
            workflow_id="wf-life", step=2, attendees=["cy@example.com"],
            start="2030-10-16T11:00:00Z", duration_minutes=45,
        )  # fmt: skip
        assert (await sw.release_hold(dropped.id)).status == "released"
        assert (await sw.release_hold(dropped.id)).replayed
        replayed = await sw.create_hold(
            workflow_id="wf-life", step=2, attendees=["cy@example.com"],
            start="2030-10-16T11:00:00Z", duration_minutes=45,
        )  # fmt: skip
        assert (replayed.replayed, replayed.id) == (True, dropped.id)
        assert (replayed.status, replayed.status_now) == ("held", "released")  # the truth now
        assert dropped.token is not None
        with pytest.raises(HoldLost) as lost:
            await sw.commit_hold(dropped.id, dropped.token)
        assert lost.value.code == "hold_released"
        with pytest.raises(SlotwardError) as missing:
            await sw.get_hold("hold_nope/../../v1/audit")  # one path segment, whatever it holds
        assert (missing.value.status, missing.value.code) == (404, "hold_not_found")


async def test_free_slots_are_found_around_a_hold(served: Served, key: str) -> None:
    named = ["Doe, Dana <dana@example.com>", "eve@example.com"]  # a comma in a display name
    async with Slotward(served.base, key) as sw:
        await sw.create_hold(
            workflow_id="wf-free", attendees=named, start="2030-10-17T10:00:00Z",
            duration_minutes=60,
        )  # fmt: skip
        answers = [
            await sw.find_free_slots(
                attendees, "2030-10-17T11:00:00+02:00", "2030-10-17T12:00:00Z", 30, limit=2
            )  # an offset's `+` reaches the server as a `+`
            for attendees in (named, ["dana@example.com", "eve@example.com"])
        ]
    for found in answers:
        assert len(found.attendees) == 2
        assert {(b.start, b.end, b.kind) for b in found.busy} == {
            ("2030-10-17T10:00:00Z", "2030-10-17T11:00:00Z", "held")
        }
        assert [(f.start, f.end) for f in found.free] == [
            ("2030-10-17T09:00:00Z", "2030-10-17T10:00:00Z"),
            ("2030-10-17T11:00:00Z", "2030-10-17T12:00:00Z"),
        ]
        assert [s.start for s in found.slots] == ["2030-10-17T09:00:00Z", "2030-10-17T09:30:00Z"]
    assert answers[0].raw == answers[1].raw


async def test_call_tool_takes_the_generic_envelope_and_keys_alike(
    served: Served, key: str
) -> None:
    arguments = {"attendees": ["fay@example.com"], "start_time": "2030-10-18T09:00:00Z",
                 "duration_minutes": 30}  # fmt: skip
    async with Slotward(served.base, key) as sw:
        doc = await sw.call_tool(CREATE_HOLD.name, arguments, workflow_id="wf-tool", step=1)
        same = await sw.create_hold(
            workflow_id="wf-tool", step=1, attendees=["fay@example.com"],
            start="2030-10-18T09:00:00Z", duration_minutes=30,
        )  # fmt: skip
        assert same.replayed
        assert same.id == doc["id"]
        slots = await sw.call_tool(
            FIND_FREE_SLOTS.name,
            {"attendees": ["fay@example.com"], "from": "2030-10-18T09:00:00Z",
             "to": "2030-10-18T10:00:00Z", "duration_minutes": 30},
            workflow_id="wf-tool",
        )  # fmt: skip
        assert [s["start"] for s in slots["slots"]] == ["2030-10-18T09:30:00Z"]
        with pytest.raises(SlotConflict):
            await sw.call_tool(CREATE_HOLD.name, arguments, workflow_id="wf-tool-2")
        with pytest.raises(SlotwardError) as bad:
            await sw.call_tool(CREATE_HOLD.name, {"attendees": []}, workflow_id="wf-tool")
        assert bad.value.status == 422


async def test_a_workflow_lists_every_page_of_its_holds(served: Served, key: str) -> None:
    async with Slotward(served.base, key) as sw:
        made = [
            await sw.create_hold(
                workflow_id="wf-list", step=i, attendees=["ivy@example.com"],
                start=f"2030-11-{1 + i // 20:02d}T{8 + (i % 20) // 2:02d}:{30 * (i % 2):02d}:00Z",
                duration_minutes=30,
            )
            for i in range(55)  # past the server's page of 50
        ]  # fmt: skip
        await sw.release_hold(made[0].id)
        await sw.commit_hold(made[1].id, made[1].token or 0)
        every = await sw.list_holds(workflow_id="wf-list")
        assert sorted(h.id for h in every) == sorted(h.id for h in made)
        assert [h.id for h in await sw.list_holds(workflow_id="wf-list", limit=3)] == [
            h.id for h in every[:3]
        ]
        done = await sw.list_holds(workflow_id="wf-list", status=["released", "committed"])
        assert {(h.id, h.status) for h in done} == {
            (made[0].id, "released"), (made[1].id, "committed"),
        }  # fmt: skip
        assert await sw.list_holds(workflow_id="wf-nothing") == []


async def test_a_session_passed_in_is_used_and_left_open(served: Served, key: str) -> None:
    async with aiohttp.ClientSession() as session:
        async with Slotward(served.base, key, session=session) as sw:
            found = await sw.find_free_slots(
                ["jo@example.com"], "2030-10-19T09:00:00Z", "2030-10-19T10:00:00Z", 30,
                limit=1, timezone=None,
            )  # fmt: skip
        assert [s.start for s in found.slots] == ["2030-10-19T09:00:00Z"]
        assert not session.closed
        async with session.get(served.base + "/healthz") as resp:
            assert resp.status == 200


def test_the_sync_client_books_without_an_event_loop(served: Served, key: str) -> None:
    with SyncSlotward(served.base, key) as sw:
        hold = sw.create_hold(
            workflow_id="wf-sync", attendees=["gus@example.com"], start="2030-10-19T09:00:00Z",
            duration_minutes=30,
        )  # fmt: skip
        assert hold.token is not None
        assert sw.commit_hold(hold.id, hold.token).status == "committed"
        assert sw.get_hold(hold.id).status == "committed"
        assert [h.id for h in sw.list_holds(workflow_id="wf-sync")] == [hold.id]
        with pytest.raises(SlotConflict):
            sw.create_hold(
                workflow_id="wf-sync-2", attendees=["gus@example.com"],
                start="2030-10-19T09:15:00Z", duration_minutes=30,
            )  # fmt: skip
    with pytest.raises(RuntimeError, match="closed"):
        sw.get_hold(hold.id)


async def test_the_sync_client_works_inside_a_running_loop(served: Served, key: str) -> None:
    # As in a notebook: a loop runs in this thread, where asyncio.run would refuse.
    assert asyncio.get_running_loop().is_running()
    with SyncSlotward(served.base, key) as sw:
        found = sw.find_free_slots(
            ["hal@example.com"], "2030-10-19T09:00:00Z", "2030-10-19T10:00:00Z", 60
        )
    assert [s.start for s in found.slots] == ["2030-10-19T09:00:00Z"]


async def test_the_key_is_in_no_repr_log_line_or_error(
    served: Served, key: str, caplog: pytest.LogCaptureFixture
) -> None:
    wrong = key[:-6] + "SECRET"  # a well-formed key the server does not know
    seen: list[str] = []
    caplog.set_level(logging.DEBUG)
    for secret in (key, wrong):
        async with Slotward(served.base, secret, retries=1, sleep=_no_wait) as sw:
            seen.append(repr(sw))
            try:
                await sw.get_hold("hold_nope")
            except SlotwardError as error:
                seen += [str(error), repr(error), repr(error.problem), *_trace(error)]
        dead = Slotward(f"http://127.0.0.1:{_free_port()}", secret, retries=1, sleep=_no_wait)
        seen.append(repr(dead))
        with pytest.raises(Unreachable) as gone:
            await dead.get_hold("hold_nope")
        await dead.close()
        seen += [str(gone.value), repr(gone.value), *_trace(gone.value)]
        with SyncSlotward(served.base, secret) as sync:
            seen.append(repr(sync))
    seen += [r.getMessage() for r in caplog.records] + [caplog.text]
    assert any("retry 1 of GET /v1/holds/hold_nope" in line for line in seen)  # logs were kept
    assert any("invalid_api_key" in line for line in seen)
    for secret in (key, wrong, key.split(".")[-1], wrong.split(".")[-1]):
        assert not [line for line in seen if secret in line]


async def _no_wait(seconds: float) -> None:
    return None


def _trace(error: BaseException) -> list[str]:
    return traceback.format_exception(error)
