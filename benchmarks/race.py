"""``slotward bench race``: A agents race for S slots, then every invariant is checked.

The agents, their claims and retries are in benchmarks/race_plan.py. Every call
is recorded (the warm-up's creates too: the history must be complete) and held
against the database afterwards by the project's history checker
(``slotward.testing.history.check``): one effect per key and per intent, no
overlap at any instant, preemption only by a strictly higher priority, commits
only with the current token, acknowledged writes present, replays identical.
On top, :func:`verdict` counts the winners: exactly one live or committed hold
per slot (so per attendee), S in all. Any violation is printed and the run
exits non-zero.

In the same run, on a fresh database and server, as many uncontended creates
(one attendee each) are sent by as many agents at the same concurrency
(``uncontended``); the target is race time at most 2x that time.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import UTC, datetime

from slotward.benchmarks.baseline import check_warmup, plan
from slotward.benchmarks.loadgen import drive
from slotward.benchmarks.plans import fresh_creates, future_start, one_per_task, phase
from slotward.benchmarks.plans import warmup_phase as warmup
from slotward.benchmarks.race_plan import TENANT, agents, race_tasks, slot_email
from slotward.benchmarks.recording import calls_of
from slotward.benchmarks.results import Outcome, Result, Settings, Target, ratio
from slotward.benchmarks.servers import Databases, make_keys, slotward_server, workspace
from slotward.engine.model import Principal
from slotward.engine.rules.attendees import attendee_id_for_email
from slotward.testing.history import Call, Snapshot, check
from slotward.testing.snapshot import load_snapshot

__all__ = ["race", "verdict", "winners"]

_RACE_OK = (200, 201, 409)  # 409: a slot conflict, a retry in progress, a preempted commit


def race(settings: Settings, *, agents: int = 1000, slots: int = 10, seed: int = 0) -> Outcome:
    if not 1 <= slots <= agents:
        raise ValueError("race needs at least one slot and an agent for every slot")
    outcome = Outcome("race", settings)
    with workspace(settings.db) as databases:
        race_result, won = _race(settings, databases, outcome, agents, slots, seed)
        calm = _uncontended(settings, databases, outcome, agents, race_result.requests)
    slower = ratio(race_result.seconds, calm.seconds)
    race_result.extra |= {"agents": agents, "slots": slots, "winners": won,
                          "time_ratio_to_uncontended": slower}  # fmt: skip
    said = f"{agents} agents over {slots} slots: time / uncontended time"
    outcome.targets.append(Target(said, slower, 2.0, False))
    return outcome


def _principals(count: int, priorities: Sequence[int]) -> list[Principal]:
    return [Principal(TENANT, f"agent-{a}", "agent", priorities[a]) for a in range(count)]


def _race(
    settings: Settings, databases: Databases, outcome: Outcome, count: int, slots: int, seed: int
) -> tuple[Result, int]:
    racers = agents(count, slots, seed)
    url = databases.fresh("race")
    principals = _principals(count, [r.priority for r in racers])
    keys = make_keys(url, principals)
    at = future_start()
    c = settings.concurrency
    rounds = 1 if settings.workers == 1 else 2 * settings.workers
    with slotward_server(url, settings.workers, databases.workdir) as base:
        warm = warmup(base, count, c, at, creates=0, rounds=rounds, record=True)
        racing = phase("race", base, race_tasks(racers, at), concurrency=c,
                       seconds=settings.seconds, expect=_RACE_OK, record=True)  # fmt: skip
        answer = drive(plan(settings, [*warm, racing], keys))
    *warmed, raced = answer["phases"]
    check_warmup(outcome, warmed)
    result = outcome.add(Result.of("race", raced, settings, c), raced)
    calls = calls_of(warmed[-1]["records"], principals) + calls_of(raced["records"], principals)
    started = time.perf_counter()
    snapshot = load_snapshot(url)
    now = datetime.now(UTC)  # the snapshot's instant
    found = verdict(calls, snapshot, now, slots)
    took = time.perf_counter() - started
    outcome.problems += found
    won = sum(len(ids) for ids in winners(snapshot, now, slots).values())
    result.extra |= {"calls_checked": len(calls), "violations": len(found)}
    outcome.notes.append(f"race: {won} winners for {slots} slots; {len(calls)} calls checked "
                         f"in {took:.1f} s, {len(found)} violations")  # fmt: skip
    return result, won


def _uncontended(
    settings: Settings, databases: Databases, outcome: Outcome, count: int, requests: int
) -> Result:
    url = databases.fresh("uncontended")
    keys = make_keys(url, _principals(count, [50] * count))
    at = future_start()
    c = settings.concurrency
    rounds = 1 if settings.workers == 1 else 2 * settings.workers
    creates = fresh_creates(requests, at, count)
    with slotward_server(url, settings.workers, databases.workdir) as base:
        warm = warmup(base, count, c, at, creates=0, rounds=rounds)
        calm = phase("uncontended", base, one_per_task(creates), concurrency=c,
                     seconds=settings.seconds, expect=(201,))  # fmt: skip
        answer = drive(plan(settings, [*warm, calm], keys))
    *warmed, measured = answer["phases"]
    check_warmup(outcome, warmed)
    return outcome.add(Result.of("uncontended", measured, settings, c), measured)


def winners(snapshot: Snapshot, now: datetime, slots: int) -> dict[int, list[str]]:
    """Per slot, the ids of the holds that block it at ``now`` (live or committed)."""
    ids = {attendee_id_for_email(TENANT, slot_email(s)): s for s in range(slots)}
    found: dict[int, list[str]] = {s: [] for s in range(slots)}
    for hold in snapshot.holds:
        if hold.tenant == TENANT and hold.blocks_at(now):
            for attendee in hold.attendees:
                if attendee in ids:
                    found[ids[attendee]].append(hold.id)
    return found


def verdict(calls: Sequence[Call], snapshot: Snapshot, now: datetime, slots: int) -> list[str]:
    """Every broken invariant, as a line to print; empty when the race was correct.

    The history checker's violations, then the winners: exactly one per slot
    (a slot is one attendee, so one per attendee too), ``slots`` in all.
    """
    problems = [f"{v.rule}: {v.detail}" for v in check(calls, snapshot, now)]
    found = winners(snapshot, now, slots)
    for slot, ids in sorted(found.items()):
        if len(ids) != 1:
            problems.append(f"slot {slot} ({slot_email(slot)}) has {len(ids)} winners: "
                            f"{', '.join(sorted(ids)) or 'none'}")  # fmt: skip
    total = sum(len(ids) for ids in found.values())
    if total != slots:
        problems.append(f"{total} winners for {slots} slots")
    return problems
