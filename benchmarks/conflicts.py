"""``slotward bench conflicts``: what a refused claim costs against a fresh create.

One server on a fresh database. First (recorded, not measured) the contested
attendees' calendars are filled: each gets a day of back-to-back 30-minute
holds with a few free half hours between them, every other one committed, the
rest held for an hour. Then two scenarios are measured in the same run:

- ``creates``: N fresh creates on N attendees nobody else uses (the yardstick,
  as ``bench throughput`` measures them);
- ``conflicts``: N claims on the full calendars, every one refused (409
  ``slot_conflict``) with its conflicts and its alternatives: the server reads
  the attendees' blockers, searches the free slots around the claim, audits
  the refusal and writes the problem document. Each claim is a distinct
  intent (its attendee and its 15-minute-grid start) in a workflow of its
  own, so none is a replay.

Target: a conflict's server CPU at most 1.5x a fresh create's; the same ratio
of p50 latencies is reported too. Every call (warm-up and calendars included)
is recorded and held against the database with the history checker; a
violation, a call that failed, or a refusal without alternatives makes the
run exit non-zero.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from slotward.benchmarks.baseline import check_warmup, plan, warm_count
from slotward.benchmarks.loadgen import drive
from slotward.benchmarks.plans import (
    Call,
    create_call,
    fresh_creates,
    future_start,
    one_per_task,
    phase,
)
from slotward.benchmarks.plans import warmup_phase as warmup
from slotward.benchmarks.recording import calls_of, violations
from slotward.benchmarks.results import Outcome, Result, Settings, Target, ratio
from slotward.benchmarks.servers import make_keys, slotward_server, workspace
from slotward.engine.model import Principal

__all__ = ["busy_day", "conflicts", "refused_claims"]

TENANT = "bench"
SLOT = timedelta(minutes=30)
SLOTS = 48  # a day of half hours
_STEP = timedelta(minutes=15)  # claims start on the alternatives' grid
_GAP_EVERY = 11  # about four free half hours a day
_SEED_TTL = 3600  # held seeds outlive the run


def _free(attendee: int, slot: int) -> bool:
    return (slot + attendee) % _GAP_EVERY == 0


def busy_day(attendees: int, day: datetime, agents: int) -> tuple[list[Call], list[Call]]:
    """The creates filling ``attendees`` calendars on ``day``, and the commits of
    every other one (each attendee's calendar is ``busy-<a>@bench.example``)."""
    creates: list[Call] = []
    for a in range(attendees):
        for slot in range(SLOTS):
            if _free(a, slot):
                continue
            name = f"busy-{a}-{slot}"
            call = create_call(name, f"busy-{a}@bench.example", day + slot * SLOT,
                               len(creates) % agents, call_id=name, intent=name)  # fmt: skip
            call["body"]["hold_ttl_seconds"] = _SEED_TTL
            creates.append(call)
    commits = [
        {"op": "commit", "of": c["id"], "key": c["key"]} for i, c in enumerate(creates) if i % 2
    ]
    return creates, commits


def _claim_starts(attendee: int, day: datetime) -> list[datetime]:
    """The 15-minute starts on ``day`` whose half hour meets a seeded hold."""
    busy = [day + s * SLOT for s in range(SLOTS) if not _free(attendee, s)]
    starts = [day + i * _STEP for i in range(SLOTS * 2 - 1)]
    return [s for s in starts if any(b < s + SLOT and s < b + SLOT for b in busy)]


def refused_claims(count: int, day: datetime, agents: int) -> tuple[int, list[Call]]:
    """How many attendees' calendars ``count`` distinct refused claims need, and
    the claims, the attendees in turn (so concurrent calls meet different ones)."""
    per: list[list[datetime]] = []
    while sum(map(len, per)) < count:
        per.append(_claim_starts(len(per), day))
    turns = [(a, starts[i]) for i in range(max(map(len, per)))
             for a, starts in enumerate(per) if i < len(starts)]  # fmt: skip
    claims = [
        create_call(f"claim-{j}", f"busy-{a}@bench.example", start, j % agents,
                    intent=f"claim-{j}")
        for j, (a, start) in enumerate(turns[:count])
    ]  # fmt: skip
    return len(per), claims


def _agents(settings: Settings) -> list[Principal]:
    return [Principal(TENANT, f"agent-{i}", "agent", 50) for i in range(settings.concurrency)]


def conflicts(settings: Settings) -> Outcome:
    outcome = Outcome("conflicts", settings)
    c, n, s = settings.concurrency, settings.requests, settings.seconds
    day = future_start()
    attendees, claims = refused_claims(n, day, c)
    seeds, commits = busy_day(attendees, day, c)
    creates = fresh_creates(n, day + timedelta(days=1), c)
    principals = _agents(settings)
    calendars = [
        phase("calendars", "", one_per_task(seeds), concurrency=c, seconds=600, expect=(201,)),
        phase("commits", "", one_per_task(commits), concurrency=c, seconds=600, expect=(200,)),
    ]
    measured = [
        phase("creates", "", one_per_task(creates), concurrency=c, seconds=s, expect=(201,)),
        phase("conflicts", "", one_per_task(claims), concurrency=c, seconds=s, expect=(409,)),
    ]
    with workspace(settings.db) as databases:
        url = databases.fresh("conflicts")
        keys = make_keys(url, principals)
        rounds = 1 if settings.workers == 1 else 2 * settings.workers
        with slotward_server(url, settings.workers, databases.workdir) as base:
            warm = warmup(base, len(keys), c, day,
                          creates=warm_count(settings), rounds=rounds, record=True)  # fmt: skip
            phases = [{**p, "base": base, "record": True} for p in (*calendars, *measured)]
            answered: list[Mapping[str, Any]] = drive(plan(settings, [*warm, *phases], keys))[
                "phases"
            ]
        check_warmup(outcome, answered[: len(warm) + len(calendars)])
        _check_history(outcome, url, answered[len(warm) - 1 :], principals)
    fresh, refused = (outcome.add(Result.of(p["name"], p, settings, c), p) for p in answered[-2:])
    _check_refusals(outcome, answered[-1], refused)
    refused.extra["contested_attendees"] = attendees
    refused.extra["seeded_holds"] = len(seeds)
    refused.extra["cpu_ratio_to_create"] = ratio(
        refused.server_cpu_us_per_call or 0.0, fresh.server_cpu_us_per_call or 0.0
    )
    refused.extra["p50_ratio_to_create"] = ratio(refused.p50_ms, fresh.p50_ms)
    outcome.targets += [
        Target("conflict / fresh create, server CPU per call",
               refused.extra["cpu_ratio_to_create"], 1.5, False),
        Target("conflict / fresh create, p50 latency",
               refused.extra["p50_ratio_to_create"], 1.5, False),
    ]  # fmt: skip
    return outcome


def _check_history(
    outcome: Outcome, url: str, phases: Sequence[Mapping[str, Any]], principals: Sequence[Principal]
) -> None:
    """Every recorded call (the warm-up's creates on) against the database."""
    calls = [call for p in phases for call in calls_of(p["records"], principals)]
    started = time.perf_counter()
    found = violations(url, calls)
    took = time.perf_counter() - started
    outcome.problems += found
    outcome.notes.append(f"history: {len(calls)} calls checked in {took:.1f} s, "
                         f"{len(found)} violations")  # fmt: skip


def _check_refusals(outcome: Outcome, measured: Mapping[str, Any], result: Result) -> None:
    """Each refusal names what it met and where else to go; none is a replay."""
    bodies = [json.loads(base64.b64decode(r["body"])) for r in measured["records"]
              if r["status"] == 409]  # fmt: skip
    bare = sum(1 for b in bodies if b.get("code") != "slot_conflict" or not b.get("alternatives")
               or not b.get("conflicts"))  # fmt: skip
    if bare:
        outcome.problems.append(f"conflicts: {bare} refusals without conflicts or alternatives")
    if measured["replayed"]:
        outcome.problems.append(f"conflicts: {measured['replayed']} answered as replays")
    met = sum(len(b.get("conflicts", ())) for b in bodies)
    result.extra["conflicts_per_refusal"] = round(met / len(bodies), 2) if bodies else 0.0
