"""``slotward bench baseline``: the ceilings, measured in the same run.

Two servers driven by the same load generator at the same concurrency:

- ``echo``: a bare aiohttp JSON echo (benchmarks/echo.py): what one HTTP
  server process can answer on this machine at all;
- ``reference``: a minimal server doing the store transaction of a hold create
  and nothing else (benchmarks/reference.py), on a fresh database of the same
  kind: what the store can do.

``throughput`` measures the reference again, in turns with slotward's
creates (benchmarks/interleave.py), to hold slotward against it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from slotward.api.config import Config
from slotward.benchmarks.loadgen import drive
from slotward.benchmarks.plans import (
    Call,
    Phase,
    fresh_creates,
    future_start,
    one_per_task,
    phase,
)
from slotward.benchmarks.results import Outcome, Result, Settings, ratio
from slotward.benchmarks.servers import (
    Databases,
    echo_server,
    reference_server,
    server_pid,
    workspace,
)

__all__ = [
    "baseline",
    "check_warmup",
    "measure_reference",
    "plan",
    "reference_calls",
    "reference_warmup",
    "settle_seconds",
    "warm_count",
]

_SETTLE_MAX = 5.0  # every phase waits it: a long sweep interval must not stretch them all


def warm_count(settings: Settings) -> int:
    """How many creates warm a server up: a tenth of the run, 20 to 200."""
    return min(200, max(20, settings.requests // 10))


def plan(
    settings: Settings, phases: Sequence[Mapping[str, Any]], keys: Sequence[str] = ()
) -> dict[str, Any]:
    """The load generator's plan; each phase names its server's pid (started by
    benchmarks/servers.py) so the load generator measures the server's CPU."""
    return {
        "keys": list(keys),
        "concurrency": settings.concurrency,
        "max_seconds": settings.seconds,
        "phases": [_with_server(p) for p in phases],
    }


def _with_server(spec: Mapping[str, Any]) -> dict[str, Any]:
    pid = server_pid(str(spec.get("base", "")))
    if pid is None or "server_pid" in spec:
        return dict(spec)
    return {"settle_seconds": settle_seconds(), **spec, "server_pid": pid}


def settle_seconds(env: Mapping[str, str] | None = None) -> float:
    """How long after a phase's last answer its server's work is still the phase's.

    A slotward server carries part of a call's work out after answering it:
    the relay's turn (woken at once, and every ``SLOTWARD_RELAY_INTERVAL``),
    the storm watch's hand-over of replay counts (every
    ``SLOTWARD_SWEEP_INTERVAL``). The load generator counts the server's CPU
    over this much longer (benchmarks/loadgen.py), and the next phase starts
    after it: one sweep and one relay interval, and half a second; at most 5 s.
    """
    config = Config.from_env(os.environ if env is None else env)
    later = config.sweep_interval_seconds + config.relay_interval_seconds + 0.5
    return min(later, _SETTLE_MAX)


def reference_calls(creates: Sequence[Call], tenants: int = 1) -> list[Call]:
    """``creates`` as the reference takes them: without keys, and with several
    tenants the tenant of a call's key (agent ``k`` is in tenant ``k mod
    tenants``) in its ``X-Tenant`` header."""
    calls = [{k: v for k, v in c.items() if k not in ("key", "id")} for c in creates]
    if tenants > 1:
        for call, create in zip(calls, creates, strict=True):
            call["headers"] = {"X-Tenant": f"bench-{int(create['key']) % tenants}"}
    return calls


def reference_warmup(settings: Settings, base: str) -> Phase:
    """The reference's warm-up: creates of its own, at least one per connection."""
    count = max(warm_count(settings), settings.concurrency)
    warm = fresh_creates(count, future_start(), 0, "warm")
    return phase("reference warm", base, one_per_task(warm), concurrency=settings.concurrency,
                 seconds=120)  # fmt: skip


def measure_reference(
    settings: Settings,
    databases: Databases,
    creates: Sequence[Call],
    outcome: Outcome,
    tenants: int = 1,
) -> Result:
    """The reference server on a fresh database, sent ``creates`` (:func:`reference_calls`)."""
    calls = reference_calls(creates, tenants)
    url = databases.fresh("reference")
    c = settings.concurrency
    with reference_server(url, settings.workers, databases.workdir) as base:
        answer = drive(plan(settings, [
            reference_warmup(settings, base),
            phase("reference", base, one_per_task(calls), concurrency=c, seconds=settings.seconds),
        ]))  # fmt: skip
    warmed, measured = answer["phases"]
    check_warmup(outcome, [warmed])
    return outcome.add(Result.of("reference", measured, settings, c), measured)


def check_warmup(outcome: Outcome, phases: Sequence[Mapping[str, Any]]) -> None:
    """A warm-up call that failed is a problem too: the server is not well."""
    for p in phases:
        if p["errors"]:
            samples = "; ".join(p["error_samples"])
            outcome.problems.append(f"warm-up {p['name']}: {p['errors']} calls failed ({samples})")


def baseline(settings: Settings) -> Outcome:
    """Echo and reference, ``settings.requests`` each at ``settings.concurrency``."""
    outcome = Outcome("baseline", settings)
    start = future_start()
    creates = fresh_creates(settings.requests, start, 0)
    c = settings.concurrency
    with workspace(settings.db) as databases:
        echoes = [{"op": "post", "path": "/echo", "body": call["body"]} for call in creates]
        warm = echoes[: max(c, warm_count(settings))]
        with echo_server(settings.workers, databases.workdir) as base:
            answer = drive(plan(settings, [
                phase("warm", base, one_per_task(warm), concurrency=c, seconds=120,
                      expect=(200,)),
                phase("echo", base, one_per_task(echoes), concurrency=c,
                      seconds=settings.seconds, expect=(200,)),
            ]))  # fmt: skip
        warmed, measured = answer["phases"]
        check_warmup(outcome, [warmed])
        echo = outcome.add(Result.of("echo", measured, settings, c), measured)
        reference = measure_reference(settings, databases, creates, outcome)
    reference.extra["ratio_to_echo"] = ratio(reference.req_per_s, echo.req_per_s)
    reference.extra["p99_ratio_to_echo"] = ratio(reference.p99_ms, echo.p99_ms)
    return outcome
