"""``slotward bench waiters``: does a crowd of waiting duplicates slow another tenant down?

One server, two measurements in the same run. ``alone``: plain creates of
tenant ``bench-0`` at C agents. ``waiters``: as many other creates of that
tenant while ``--waiters`` W duplicates of tenant ``bench-waits`` wait
(``wait_ms`` 30 s, sent again whenever one gives up) on ``LEASES`` executions
whose leases nobody completes meanwhile. Each is run ``ROUNDS`` times, in
turn (N / ROUNDS creates a time), and pooled: on a shared machine a burst of
someone else's work then falls on both alike. Target: the creates' p99 with
the waiters at most 1.2x their p99 alone. A waiter that polled the store (ten
reads a second each, before issue 12) took the other tenant's worst latency
from 2 to 90 ms.

After each round with waiters its leases complete: every waiter must be
answered with that completion (200, replayed), else the run fails; how long
after its completion was sent is noted (one process, or PostgreSQL: a signal,
milliseconds; SQLite with several workers: the fallback look, up to
``SLOTWARD_WAIT_POLL_SECONDS``).

Every call (the creates, the leases, the waiters' tries, the completions) is
recorded and the history checked against the database after the server
stopped (benchmarks/recording.py): a violation fails the run.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp

from slotward.benchmarks.baseline import check_warmup, plan, warm_count
from slotward.benchmarks.loadgen import drive
from slotward.benchmarks.plans import Phase, fresh_creates, future_start, one_per_task, phase
from slotward.benchmarks.plans import warmup_phase as warmup
from slotward.benchmarks.recording import Recorder, calls_of, check_history
from slotward.benchmarks.results import (
    Outcome,
    Result,
    Settings,
    Target,
    percentile,
    pooled,
    ratio,
)
from slotward.benchmarks.servers import make_keys, slotward_server, workspace
from slotward.engine.model import Principal

__all__ = ["LEASES", "ROUNDS", "waiters"]

LEASES = 10  # executions the waiters wait on, in turn
ROUNDS = 4  # alone and with waiters in turn, pooled: the machine's noise hits both alike
_WAIT_MS = 30_000
_PARK_SECONDS = 1.0  # for the waiters' requests to reach the server and start waiting
_GOAL = 1.2


def waiters(settings: Settings, *, count: int) -> Outcome:
    outcome = Outcome("waiters", settings)
    c = settings.concurrency
    principals = [Principal("bench-0", f"agent-{i}", "agent", 50) for i in range(c)]
    principals.append(Principal("bench-waits", "waiter", "agent", 50))
    with workspace(settings.db) as databases:
        url = databases.fresh("waiters")
        keys = make_keys(url, principals)
        waits = _Waits(principals[-1], keys[-1], Recorder())
        with slotward_server(url, settings.workers, databases.workdir) as base:
            alone, crowded, answers, records = asyncio.run(
                _measure(settings, base, keys, count, outcome, waits)
            )
        calls = [c for p in records for c in calls_of(p, principals)]
        check_history(outcome, url, [*calls, *waits.recorder.calls])
    mine = outcome.add(Result.of("alone", alone, settings, c), alone)
    with_them = outcome.add(Result.of("waiters", crowded, settings, c), crowded)
    with_them.extra["waiters"] = count
    with_them.extra["p99_ratio_to_alone"] = ratio(with_them.p99_ms, mine.p99_ms)
    outcome.targets.append(
        Target(f"another tenant's create p99 with {count} waiters / without",
               with_them.extra["p99_ratio_to_alone"], _GOAL, False)
    )  # fmt: skip
    _judge(outcome, answers, count * ROUNDS)
    return outcome


@dataclass(frozen=True)
class _Waits:
    """Who leases and waits (tenant ``bench-waits``), and the recorder of those calls."""

    who: Principal
    secret: str
    recorder: Recorder


async def _measure(
    settings: Settings,
    base: str,
    keys: Sequence[str],
    count: int,
    outcome: Outcome,
    waits: _Waits,
) -> tuple[Mapping[str, Any], Mapping[str, Any], list[tuple[int, bool, float]], list[Any]]:
    """The ``alone`` and ``waiters`` phases (each pooled over ``ROUNDS``), each
    waiter's final answer (status, replayed, seconds from its completion's sending),
    and the load generator's records of every create."""
    c, s = settings.concurrency, settings.seconds
    start = future_start()
    warm = warmup(base, len(keys), c, start, creates=warm_count(settings), record=True)
    warmed = (await asyncio.to_thread(drive, plan(settings, warm, keys)))["phases"]
    check_warmup(outcome, warmed)
    records = [warmed[-1]["records"]]
    per_round = max(1, settings.requests // ROUNDS)
    done: dict[str, list[Mapping[str, Any]]] = {"alone": [], "waiters": []}
    answers: list[tuple[int, bool, float]] = []
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(connector=connector) as session:
        for r in range(ROUNDS):
            for name in ("alone", "waiters") if r % 2 == 0 else ("waiters", "alone"):
                label = f"{name}-{r}"
                # Each load generator opens its connections afresh: warm them first.
                rewarm = fresh_creates(max(c, 20), start, c, f"warm-{label}")
                creates = fresh_creates(per_round, start, c, label)
                phases = [
                    phase(f"warm {label}", base, one_per_task(rewarm), concurrency=c, seconds=120,
                          record=True),
                    phase(name, base, one_per_task(creates), concurrency=c, seconds=s,
                          expect=(201,), record=True),
                ]  # fmt: skip
                if name == "alone":
                    answer = await asyncio.to_thread(drive, plan(settings, phases, keys))
                else:
                    answer, woken = await _crowded(session, base, keys, count, r, settings,
                                                   phases, waits)  # fmt: skip
                    answers += woken
                check_warmup(outcome, answer["phases"][:1])
                done[name].append(answer["phases"][1])
                records += [p["records"] for p in answer["phases"]]
    return pooled(done["alone"]), pooled(done["waiters"]), answers, records


async def _crowded(
    session: aiohttp.ClientSession,
    base: str,
    keys: Sequence[str],
    count: int,
    r: int,
    settings: Settings,
    phases: Sequence[Phase],
    waits: _Waits,
) -> tuple[dict[str, Any], list[tuple[int, bool, float]]]:
    """Run ``phases`` while ``count`` duplicates wait on leases of round ``r``; then
    complete the leases and collect the waiters' answers."""
    calls = [r * LEASES + i for i in range(LEASES)]
    tokens = [await _lease(session, base, waits, n) for n in calls]
    sent = dict.fromkeys(calls, 0.0)
    crowd = [
        asyncio.create_task(_wait(session, base, waits, calls[i % LEASES], sent))
        for i in range(count)
    ]
    await asyncio.sleep(_PARK_SECONDS)
    answer = await asyncio.to_thread(drive, plan(settings, phases, keys))
    for n, token in zip(calls, tokens, strict=True):
        sent[n] = time.perf_counter()
        await _complete(session, base, waits, n, token)
    return answer, list(await asyncio.gather(*crowd))


def _execution(i: int) -> dict[str, Any]:
    return {"workflow_id": f"bench-wait-{i}", "tool": "send_email", "arguments": {"n": i},
            "lease_seconds": 300}  # fmt: skip


async def _lease(session: aiohttp.ClientSession, base: str, waits: _Waits, i: int) -> str:
    status, raw, _ = await waits.recorder.post(
        session, f"{base}/v1/executions", _execution(i), who=waits.who, secret=waits.secret,
        op="acquire", intent=f"wait-{i}",
    )  # fmt: skip
    if status != 201:
        raise RuntimeError(f"acquiring lease {i}: {status} {raw[:300]!r}")
    doc = json.loads(raw)
    return str(doc["key"]) + " " + str(doc["lease_token"])


async def _complete(
    session: aiohttp.ClientSession, base: str, waits: _Waits, i: int, held: str
) -> None:
    key, token = held.split(" ")
    body = {"lease_token": token, "outcome": "succeeded", "result": f"sent {i}"}
    status, raw, _ = await waits.recorder.post(
        session, f"{base}/v1/executions/{key}/complete", body, who=waits.who,
        secret=waits.secret, op="complete", target=key, intent=f"complete-{i}",
    )  # fmt: skip
    if status != 200:
        raise RuntimeError(f"completing lease {i}: {status} {raw[:300]!r}")


async def _wait(
    session: aiohttp.ClientSession, base: str, waits: _Waits, i: int, sent: dict[int, float]
) -> tuple[int, bool, float]:
    """Wait on execution ``i`` until it is answered; again after each 409 give-up."""
    body = {**_execution(i), "wait_ms": _WAIT_MS}
    timeout = aiohttp.ClientTimeout(total=_WAIT_MS / 1000 + 30)
    while True:
        status, _, headers = await waits.recorder.post(
            session, f"{base}/v1/executions", body, who=waits.who, secret=waits.secret,
            op="acquire", intent=f"wait-{i}", patience=timeout,
        )  # fmt: skip
        if status == 409 and not sent[i]:
            continue  # its wait ran out before the completion: wait again
        replayed = headers.get("Idempotent-Replayed") == "true"
        return status, replayed, time.perf_counter() - sent[i]


def _judge(outcome: Outcome, answers: Sequence[tuple[int, bool, float]], count: int) -> None:
    wrong = [a for a in answers if a[:2] != (200, True)]
    if wrong:
        outcome.problems.append(
            f"{len(wrong)} of {count} waiters were not answered with the completion "
            f"(200, replayed): {sorted({a[0] for a in wrong})}"
        )
    woken = sorted(a[2] * 1000 for a in answers)
    outcome.notes.append(
        f"waiters: {count} in all, {count // ROUNDS} per round on {LEASES} leases, answered "
        f"{percentile(woken, 0.5):.1f} ms (p50), {percentile(woken, 1.0):.1f} ms (max) after "
        "their completion was sent"
    )
