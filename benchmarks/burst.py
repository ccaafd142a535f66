"""``slotward bench burst``: never-seen keys arriving together, every one served.

C agents (``--concurrency``, default 200), one API key and one connection
each, are warmed up: every key checked, the create path warmed, then all C
connections opened at once (an authenticated GET each, so no create is sent
before the bursts). Then ``--requests`` / C bursts (at least one; default 5):
in each, C creates with never-seen idempotency keys on C distinct attendees,
one per connection, all sent in the same turn of the load generator's event
loop. Every one must be answered 201: a 503, a 409, a timeout or any other
answer is a problem (exit 1). The issue's target is exactly that ("200
never-seen keys arriving together all served"); the creates pooled over the
bursts (``burst``: p50, p99, server CPU per call) are reported beside the
reference server sent the very same bursts (``reference``), whose p99 and CPU
are the yardstick on a noisy machine.

Every call made to slotward is recorded and the history checked against the
database afterwards (benchmarks/recording.py): a violation fails the run.

A subcommand of its own, not a phase of ``replay``: replay measures steady
rates at C concurrent agents each sending one call after the other, while a
burst is C calls landing together on an idle server, whose figures are one
burst's worst latencies; mixed into replay's table they would read as its
rates, and a burst's failure is a refusal, not a slow rate.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from slotward.benchmarks.baseline import check_warmup, plan, warm_count
from slotward.benchmarks.loadgen import drive
from slotward.benchmarks.plans import Phase, fresh_creates, future_start, one_per_task, phase
from slotward.benchmarks.plans import warmup_phase as warmup
from slotward.benchmarks.recording import calls_of, check_history
from slotward.benchmarks.results import Outcome, Result, Settings, Target, cpu_ratio, pooled, ratio
from slotward.benchmarks.servers import (
    Databases,
    make_keys,
    reference_server,
    slotward_server,
    workspace,
)
from slotward.engine.model import Principal

__all__ = ["burst", "bursts"]

_WARM_CONCURRENCY = 64  # the warm-up's creates: not a burst of their own


def bursts(settings: Settings) -> list[list[dict[str, Any]]]:
    """The bursts: ``requests // concurrency`` (at least one) of ``concurrency``
    creates each; no two calls share a key, an attendee or a workflow."""
    c = settings.concurrency
    start = future_start()
    return [fresh_creates(c, start, c, f"burst{r}") for r in range(max(1, settings.requests // c))]


def _phases(base: str, planned: Sequence[Sequence[dict[str, Any]]], settings: Settings,
            record: bool) -> list[Phase]:  # fmt: skip
    """One phase per burst: as many workers as calls, so each takes one and all go at once."""
    return [
        phase(f"burst {r}", base, one_per_task(calls), concurrency=len(calls),
              seconds=settings.seconds, expect=(201,), record=record)
        for r, calls in enumerate(planned)
    ]  # fmt: skip


def _opened(base: str, keys: int, c: int) -> Phase:
    """C authenticated GETs at once (404: no such hold): every connection open."""
    checks = [{"op": "get", "path": "/v1/holds/hold_warmup", "key": k % keys} for k in range(c)]
    return phase("open connections", base, one_per_task(checks), concurrency=c, seconds=120,
                 expect=(404,))  # fmt: skip


def burst(settings: Settings) -> Outcome:
    outcome = Outcome("burst", settings)
    c = settings.concurrency
    planned = bursts(settings)
    principals = [Principal("bench-0", f"agent-{i}", "agent", 50) for i in range(c)]
    with workspace(settings.db) as databases:
        url = databases.fresh("burst")
        keys = make_keys(url, principals)
        rounds = 1 if settings.workers == 1 else 2 * settings.workers
        with slotward_server(url, settings.workers, databases.workdir) as base:
            warm = warmup(base, len(keys), min(c, _WARM_CONCURRENCY), future_start(),
                          creates=warm_count(settings), rounds=rounds, record=True)  # fmt: skip
            warm.append(_opened(base, len(keys), c))
            answer = drive(plan(settings, [*warm, *_phases(base, planned, settings, True)], keys))
        warmed, done = answer["phases"][: len(warm)], answer["phases"][len(warm) :]
        check_warmup(outcome, warmed)
        calls = [x for p in (warmed[-2], *done) for x in calls_of(p["records"], principals)]
        check_history(outcome, url, calls)
        both = pooled(done)
        mine = outcome.add(Result.of("burst", both, settings, c), both)
        reference = _reference(settings, databases, planned, outcome)
    _judge(outcome, mine, done, c)
    mine.extra |= {"bursts": len(done), "max_ms": round(max(_latencies(done), default=0.0), 2),
                   "sent_within_ms": _spread(done),
                   "p99_ratio_to_reference": ratio(mine.p99_ms, reference.p99_ms)}  # fmt: skip
    outcome.notes.append(f"burst: each burst's {c} creates were sent within "
                         f"{mine.extra['sent_within_ms']:.1f} ms")  # fmt: skip
    mine.extra["cpu_ratio_to_reference"] = cpu_ratio(mine, reference)
    return outcome


def _spread(phases: Sequence[Mapping[str, Any]]) -> float:
    """The longest time, in ms, from the first to the last sending of one burst: how
    nearly together its calls went out (the recorded client times)."""
    spreads = [max(r["invoked"] for r in p["records"]) - min(r["invoked"] for r in p["records"])
               for p in phases if p["records"]]  # fmt: skip
    return round(max(spreads, default=0.0) * 1000, 2)


def _latencies(phases: Sequence[Mapping[str, Any]]) -> list[float]:
    return [x for p in phases for x in p["latencies_ms"]]


def _judge(outcome: Outcome, mine: Result, done: Sequence[Mapping[str, Any]], c: int) -> None:
    """Every create of every burst answered 201, or the run fails."""
    sent = len(done) * c
    served = sum(int(p["statuses"].get("201", 0)) for p in done)
    outcome.targets.append(
        Target(f"{c} never-seen keys arriving together: answered 201 / sent",
               ratio(served, sent), 1.0, True)
    )  # fmt: skip
    if served != sent:  # which calls failed and how: Outcome.add's problem
        codes = mine.extra["codes"]
        outcome.problems.append(f"burst: {sent - served} of {sent} creates were not served "
                                f"(statuses {mine.statuses}, codes {codes})")  # fmt: skip


def _reference(
    settings: Settings,
    databases: Databases,
    planned: Sequence[Sequence[dict[str, Any]]],
    outcome: Outcome,
) -> Result:
    """The reference server sent the same bursts (without keys), after the same warm-up."""
    c = settings.concurrency
    bare = [[{k: v for k, v in x.items() if k not in ("key", "id")} for x in calls]
            for calls in planned]  # fmt: skip
    warm = fresh_creates(max(warm_count(settings), c), future_start(), 0, "warm")
    opened = [{"op": "get", "path": "/healthz"}] * c
    url = databases.fresh("reference")
    with reference_server(url, settings.workers, databases.workdir) as base:
        answer = drive(plan(settings, [
            phase("warm", base, one_per_task(warm), concurrency=min(c, _WARM_CONCURRENCY),
                  seconds=120),
            phase("open connections", base, one_per_task(opened), concurrency=c, seconds=120,
                  expect=(200,)),
            *_phases(base, bare, settings, False),
        ]))  # fmt: skip
    warmed, done = answer["phases"][:2], answer["phases"][2:]
    check_warmup(outcome, warmed)
    both = pooled(done)
    return outcome.add(Result.of("reference", both, settings, c), both)
