"""``slotward bench scale``: claim latency as the stored holds grow.

For each size (default 10k, 100k and 1M holds): a fresh database is filled
with that many faithful stored holds (benchmarks/seed.py: committed, released,
expired and preempted holds with their ledger records, audit chain and
outbox), a server is started on it, and a bounded number of claims
(``--requests``, default 500) is sent at moderate concurrency (default 8):
creates on the seeded attendees at free times, so every claim runs the
overlap check against a calendar as full as the size makes it. The latencies
are reported per size and as ratios to the smallest size; the target is the
largest size at most 1.3x the smallest (p50 and p99).

Every create and claim is recorded and the history checked after each size's
server stopped, against the rows the calls can touch
(benchmarks/recent_snapshot.py: reading a million seeded holds back would
take longer than the claims): a violation fails the run.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta

from slotward.adapters.store.instants import to_us
from slotward.benchmarks.baseline import check_warmup, plan, warm_count
from slotward.benchmarks.loadgen import drive
from slotward.benchmarks.plans import Call, create_call, future_start, one_per_task, phase
from slotward.benchmarks.plans import warmup_phase as warmup
from slotward.benchmarks.recent_snapshot import mark, recent_snapshot
from slotward.benchmarks.recording import calls_of, check_history
from slotward.benchmarks.results import Outcome, Result, Settings, Target, ratio
from slotward.benchmarks.servers import Databases, make_keys, slotward_server, workspace
from slotward.engine.clock import SystemClock
from slotward.engine.model import Principal

__all__ = ["claims", "scale"]

TENANT = "bench"
_MINUTES = 30
_MARGIN_US = 1_000_000  # the server's clock is this machine's: a second is plenty


def claims(count: int, attendees: Sequence[str], free_from: datetime, agents: int) -> list[Call]:
    """``count`` creates on ``attendees`` in turn, back to back from ``free_from``.

    No two overlap each other, and none overlaps a seeded hold.
    """
    out = []
    for j in range(count):
        attendee = attendees[j % len(attendees)]
        start = free_from + timedelta(minutes=_MINUTES * (j // len(attendees)))
        out.append(create_call(f"claim-{j}", attendee, start, j % agents, minutes=_MINUTES))
    return out


def scale(settings: Settings, *, sizes: Sequence[int] = (10_000, 100_000, 1_000_000)) -> Outcome:
    outcome = Outcome("scale", settings)
    with workspace(settings.db) as databases:
        for size in sorted(set(sizes)):
            _one_size(settings, databases, outcome, size)
    smallest = outcome.results[0]
    for r in outcome.results:
        r.extra["p50_ratio_to_smallest"] = ratio(r.p50_ms, smallest.p50_ms)
        r.extra["p99_ratio_to_smallest"] = ratio(r.p99_ms, smallest.p99_ms)
    if len(outcome.results) > 1:
        largest = outcome.results[-1]
        small, large = smallest.extra["stored_holds"], largest.extra["stored_holds"]
        for q in ("p50", "p99"):
            outcome.targets.append(Target(
                f"claim {q} with {large:,} holds / with {small:,}",
                largest.extra[f"{q}_ratio_to_smallest"], 1.3, False,
            ))  # fmt: skip
    return outcome


def _progress(size: int) -> Callable[[str], None]:
    """Seeding a million holds takes a while: say how far it got (on stderr)."""
    return lambda line: print(f"seeding {size:,} holds: {line}", file=sys.stderr, flush=True)


def _one_size(settings: Settings, databases: Databases, outcome: Outcome, size: int) -> None:
    from slotward.benchmarks.seed import seed_holds  # the seeding code is large: on use only

    url = databases.fresh(f"scale_{size}")
    c = settings.concurrency
    principals = [Principal(TENANT, f"claimer-{i}", "agent", 50) for i in range(c)]
    keys = make_keys(url, principals)  # migrates the schema, which seeding needs
    seeded = seed_holds(url, size, tenant=TENANT, progress=_progress(size))
    # The first claims after a start read the big tables' pages in (a 1M-hold
    # SQLite file took 1.7 s for its first): warm up on the seeded calendar itself.
    warming = max(c, warm_count(settings))
    calls = claims(warming + settings.requests, seeded.attendees, seeded.free_from, c)
    rounds = 1 if settings.workers == 1 else 2 * settings.workers
    since = mark(url, to_us(SystemClock().now()) - _MARGIN_US)  # all the calls write is newer
    with slotward_server(url, settings.workers, databases.workdir) as base:
        warm = warmup(base, c, c, future_start(), creates=0, rounds=rounds, record=True)
        warm.append(phase("warm claims", base, one_per_task(calls[:warming]), concurrency=c,
                          seconds=120, expect=(201,), record=True))  # fmt: skip
        measured = phase(f"claims-{size}", base, one_per_task(calls[warming:]), concurrency=c,
                         seconds=settings.seconds, expect=(201,), record=True)  # fmt: skip
        answer = drive(plan(settings, [*warm, measured], keys))
    *warmed, done = answer["phases"]
    check_warmup(outcome, warmed)
    result = outcome.add(Result.of(f"claims-{size}", done, settings, c), done)
    result.extra |= {"stored_holds": seeded.holds, "seed_seconds": round(seeded.seconds, 1)}
    # The warm-up's creates and claims, and the measured claims (not the key checks: GETs).
    recorded = [x for p in (*warmed[-2:], done) for x in calls_of(p["records"], principals)]
    check_history(outcome, url, recorded, lambda: recent_snapshot(url, since, recorded),
                  label=f"{size:,} holds")  # fmt: skip
