"""A create this process has not answered skips the read-side replay lookup (api/seen.py).

Over a real SQLite file, through the application services. The store is the
real one, wrapped only to count the reads and writes it is asked for: the
point is how many hops a create takes, and that skipping the read never
changes an answer (a replay this process has not seen is found by the write).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import pytest

from slotward.api import service
from slotward.api.bootstrap import Services, bootstrap
from slotward.api.config import Config
from slotward.api.holds import _hold_request
from slotward.api.seen import SeenCreates, marks_of
from slotward.engine.clock import FixedClock
from slotward.engine.errors import ValidationFailed
from slotward.engine.model import Principal, Reply
from slotward.engine.ports import Store, UnitOfWork

T = TypeVar("T")
T0 = datetime(2030, 10, 1, 9, 0, tzinfo=UTC)
AGENT = Principal("acme", "agent-1", "agent", 50)
FIELDS = {"attendees": ["Ann@Example.com"], "start": "2030-10-02T10:00:00Z",
          "duration_minutes": 30, "title": "sync"}  # fmt: skip


@dataclass
class Counting:
    """The real store, counting what it is asked to do."""

    store: Store
    reads: int = 0
    writes: int = 0

    async def read(self, fn: Callable[[UnitOfWork], T]) -> T:
        self.reads += 1
        return await self.store.read(fn)

    async def write(self, fn: Callable[[UnitOfWork], T]) -> T:
        self.writes += 1
        return await self.store.write(fn)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.store, name)


@pytest.fixture
async def made(tmp_path: Path) -> AsyncIterator[tuple[Services, Counting, Config]]:
    config = Config(db_url=f"sqlite+aiosqlite:///{tmp_path / 'seen.db'}")
    svc = await bootstrap(config, clock=FixedClock(T0))
    counting = Counting(svc.store)
    yield replace(svc, store=counting), counting, config
    await svc.providers.close()
    await svc.store.close()


async def _create(svc: Services, fields: dict[str, Any] = FIELDS, step: object = 1,
                  key: str | None = None) -> Reply:  # fmt: skip
    return await service.create_hold(svc, AGENT, fields, workflow_id="wf-1", step=step,
                                     client_key=key)  # fmt: skip


async def test_a_fresh_create_is_one_write_and_its_replay_one_read(
    made: tuple[Services, Counting, Config],
) -> None:
    svc, counting, _ = made
    first = await _create(svc)
    assert (first.created, first.replayed, counting.reads, counting.writes) == (True, False, 0, 1)
    again = await _create(svc)
    assert (again.replayed, again.body, again.hold_id) == (True, first.body, first.hold_id)
    assert (counting.reads, counting.writes) == (1, 1)  # a read, no write


async def test_reworded_retries_and_step_drift_are_replayed_from_a_read(
    made: tuple[Services, Counting, Config],
) -> None:
    svc, counting, _ = made
    first = await _create(svc)
    reworded = [
        {**FIELDS, "attendees": [" ann@example.COM "], "title": "the sync"},
        {**FIELDS, "start": "2030-10-02T12:00:00+02:00"},
        {**{k: v for k, v in FIELDS.items() if k != "duration_minutes"},
         "end": "2030-10-02T10:30:00Z"},
    ]  # fmt: skip
    for fields in reworded:
        assert (await _create(svc, fields)).hold_id == first.hold_id
    drifted = await _create(svc, step=7)  # the agent lost count of its steps
    assert (drifted.replayed, drifted.hold_id) == (True, first.hold_id)
    assert (counting.reads, counting.writes) == (4, 1)


async def test_a_replay_this_process_has_not_seen_is_found_by_the_write(
    made: tuple[Services, Counting, Config],
) -> None:
    svc, counting, _ = made
    first = await _create(svc)
    restarted = replace(svc, seen=SeenCreates())  # another process, or after a restart
    again = await _create(restarted)
    assert (again.replayed, again.body, again.hold_id) == (True, first.body, first.hold_id)
    assert (counting.reads, counting.writes) == (0, 2)  # the write's own check answered
    drifted = await _create(replace(svc, seen=SeenCreates()), step=3)
    assert (drifted.replayed, drifted.hold_id) == (True, first.hold_id)


async def test_a_reused_client_key_is_refused_seen_or_not(
    made: tuple[Services, Counting, Config],
) -> None:
    svc, _, _ = made
    await _create(svc, key="client-key-1")
    other = {**FIELDS, "start": "2030-10-03T10:00:00Z"}
    for attempt in (svc, replace(svc, seen=SeenCreates())):
        with pytest.raises(ValidationFailed) as refused:
            await _create(attempt, other, key="client-key-1")
        assert refused.value.code == "idempotency_key_reused"


async def test_duplicates_of_an_unseen_create_sent_together_make_one_hold(
    made: tuple[Services, Counting, Config],
) -> None:
    svc, counting, _ = made
    replies = await asyncio.gather(*(_create(svc) for _ in range(8)))
    assert len({r.hold_id for r in replies}) == 1
    assert sum(not r.replayed for r in replies) == 1
    assert len({r.body for r in replies}) == 1
    assert counting.writes == 1  # the duplicates shared the first one's write


def test_marks_follow_the_intent_as_given_and_are_bounded() -> None:
    seen = SeenCreates(capacity=3)
    seen.add([1, 2])
    seen.add([3, 1])  # 1 seen again: the newest now
    seen.add([4])
    assert len(seen) == 3
    assert not seen.any_seen([2])  # the oldest, forgotten
    assert seen.any_seen([1])
    assert seen.any_seen([9, 4])
    with pytest.raises(ValueError, match="capacity"):
        SeenCreates(capacity=0)


def test_marks_differ_by_tenant_workflow_and_interval_not_by_step_or_wording() -> None:
    def marks(principal: Principal = AGENT, fields: dict[str, Any] = FIELDS,
              workflow: str = "wf-1", step: object = 1) -> tuple[int, ...]:  # fmt: skip
        return marks_of(_hold_request(principal, fields, workflow, step, None, 300))

    assert marks() == marks(step=2) == marks(fields={**FIELDS, "title": "other"})
    assert marks() != marks(principal=replace(AGENT, tenant="other"))
    assert marks() != marks(workflow="wf-2")
    assert marks() != marks(fields={**FIELDS, "start": "2030-10-02T10:30:00Z"})


async def test_a_reused_key_sent_beside_a_duplicate_of_its_intent_is_refused(
    made: tuple[Services, Counting, Config],
) -> None:
    # The key was answered for another request (by another process, or before a
    # restart); sent now with the intent of a call in flight, it shares nothing.
    svc, _, _ = made
    other = {**FIELDS, "start": "2030-10-03T10:00:00Z"}
    await _create(svc, other, key="reused-key")
    fresh = replace(svc, seen=SeenCreates())
    plain, reused = await asyncio.gather(
        _create(fresh), _create(fresh, key="reused-key"), return_exceptions=True
    )
    assert isinstance(plain, Reply)
    assert plain.created
    assert isinstance(reused, ValidationFailed)
    assert reused.code == "idempotency_key_reused"


async def test_one_key_sent_with_two_requests_at_once_is_refused_for_one(
    made: tuple[Services, Counting, Config],
) -> None:
    svc, _, _ = made
    other = {**FIELDS, "start": "2030-10-03T10:00:00Z"}
    await _create(svc)
    await _create(svc, other)  # both intents answered here: their marks are seen
    assert isinstance(svc.clock, FixedClock)
    svc.clock.advance(3600)  # both holds expired: the reads find nothing to replay
    answers = await asyncio.gather(
        _create(svc, key="one-key"), _create(svc, other, key="one-key"), return_exceptions=True
    )
    refused = [a for a in answers if isinstance(a, ValidationFailed)]
    assert [a.code for a in refused] == ["idempotency_key_reused"]
    assert sum(isinstance(a, Reply) and a.created and not a.replayed for a in answers) == 1
