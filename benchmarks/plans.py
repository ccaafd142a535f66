"""Building blocks of load generator plans (benchmarks/loadgen.py): calls and phases.

Every benchmark warms up before it measures: each API key is checked once (the
server verifies a secret once per process and caches the answer), the
connections are opened, and a few creates on attendees nobody else uses warm
the store's statement caches. Only then does the clock run.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

__all__ = [
    "CREATE_OK",
    "Call",
    "Phase",
    "create_call",
    "fresh_creates",
    "future_start",
    "one_per_task",
    "phase",
    "warmup_phase",
]

Call = dict[str, Any]
Phase = dict[str, Any]
CREATE_OK = (200, 201)
_WARM_KEY_CONCURRENCY = 32  # first checks of keys: the server queues at most 64 at once


def future_start(days: int = 2) -> datetime:
    """An instant on the hour ``days`` from now (UTC): far enough that no claim is past."""
    soon = datetime.now(UTC) + timedelta(days=days)
    return soon.replace(minute=0, second=0, microsecond=0)


def instant(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def create_call(
    workflow: str,
    attendee: str,
    start: datetime,
    key: int | None,
    *,
    minutes: int = 30,
    call_id: str | None = None,
    intent: str | None = None,
) -> Call:
    """A ``POST /v1/holds`` of one attendee for ``minutes`` from ``start``."""
    body = {
        "workflow_id": workflow,
        "attendees": [attendee],
        "start": instant(start),
        "duration_minutes": minutes,
    }
    call: Call = {"op": "post", "path": "/v1/holds", "body": body}
    if key is not None:
        call["key"] = key
    if call_id is not None:
        call["id"] = call_id
    if intent is not None:
        call["intent"] = intent
    return call


def fresh_creates(count: int, start: datetime, agents: int, name: str = "create") -> list[Call]:
    """``count`` creates no two of which conflict: one attendee each, the agents in turn.

    Call ``i`` is ``<name>-<i>``: its workflow, its attendee's mailbox, its
    intent label and its id (so a commit or release can name its hold).
    Without agents the calls carry no key (the reference server takes none).
    """
    return [
        create_call(f"{name}-{i}", f"{name}-{i}@bench.example", start,
                    i % agents if agents else None, call_id=f"{name}-{i}", intent=f"{name}-{i}")
        for i in range(count)
    ]  # fmt: skip


def one_per_task(calls: Sequence[Call]) -> list[list[list[Call]]]:
    """Tasks of one call each, in order."""
    return [[[call]] for call in calls]


def phase(
    name: str,
    base: str,
    tasks: Sequence[Sequence[Sequence[Call]]],
    *,
    concurrency: int,
    seconds: float,
    expect: Sequence[int] = CREATE_OK,
    record: bool = False,
) -> Phase:
    return {
        "name": name,
        "base": base,
        "tasks": [[list(step) for step in task] for task in tasks],
        "concurrency": concurrency,
        "max_seconds": seconds,
        "expect": list(expect),
        "record": record,
    }


def warmup_phase(
    base: str,
    keys: int,
    concurrency: int,
    start: datetime,
    *,
    creates: int,
    rounds: int = 1,
    record: bool = False,
) -> list[Phase]:
    """Check every key (``rounds`` times, over fresh connections when there are
    several server processes), open the connections, and warm the create path
    with ``creates`` holds on ``warm-N`` attendees (intent labels ``warm-N``;
    at least ``concurrency`` of them, so every connection opens). Without keys
    (the reference server takes none) calls carry no Authorization."""
    out: list[Phase] = []
    if keys:
        # GET of a hold that does not exist: authenticated, then 404.
        checks = [{"op": "get", "path": "/v1/holds/hold_warmup", "key": k} for k in range(keys)]
        spec = phase("warm keys", base, one_per_task(checks * rounds), expect=(404,),
                     concurrency=min(concurrency, _WARM_KEY_CONCURRENCY), seconds=120)  # fmt: skip
        spec["fresh_connections"] = rounds > 1
        out.append(spec)
    warm = fresh_creates(max(creates, concurrency), start, keys, "warm")
    out.append(phase("warm creates", base, one_per_task(warm), concurrency=concurrency,
                     seconds=120, record=record))  # fmt: skip
    return out
