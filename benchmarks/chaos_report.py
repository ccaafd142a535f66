"""The outcome of ``slotward bench chaos``: counted from the agents and read from the store.

:func:`store_faults` reads what the store kept, whatever the agents believe:
*duplicates* are intents (one workflow each) holding more than one live or
committed hold, *double bookings* are pairs of live or committed holds of one
attendee that overlap. :func:`summarize` adds what the agents saw (landed,
compensated, refused by reason, retries, time to outcome), holds each agent's
belief against the store (a commit it was acknowledged is a committed hold, a
release a released one), and lists every violation: any of those, a history
checker violation, a server error, a server that exited on its own or
stopped uncleanly (a crash), a refused intent whose workflow still holds a
live or committed hold, an intent neither landed nor explicitly refused. The
run exits 1 when that list is not empty.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import IO, Any

from slotward.benchmarks.chaos_agents import Track
from slotward.benchmarks.results import percentile
from slotward.engine.model import Hold, HoldStatus
from slotward.testing import Snapshot

__all__ = ["KEYS", "print_summary", "store_faults", "summarize", "write_json"]

# The keys of the JSON object, in the order of the printed table.
KEYS = ("intents", "landed", "compensated", "refused", "unresolved", "duplicates",
        "double_bookings", "history_violations", "server_errors", "server_crashes",
        "retries_per_intent", "retries_max", "p50_ms", "p99_ms", "calls", "kills",
        "seconds")  # fmt: skip


def store_faults(snapshot: Snapshot, now: datetime, tenant: str) -> tuple[list[str], list[str]]:
    """The duplicates and the double bookings in ``snapshot`` at ``now``, one line each."""
    live = [h for h in snapshot.holds if h.tenant == tenant and h.blocks_at(now)]
    by_workflow: dict[str, list[Hold]] = defaultdict(list)
    by_attendee: dict[str, list[Hold]] = defaultdict(list)
    for hold in live:
        by_workflow[hold.workflow_id or ""].append(hold)
        for attendee in hold.attendees:
            by_attendee[attendee].append(hold)
    duplicates = [
        f"intent {wf} holds {len(holds)} holds: {', '.join(sorted(h.id for h in holds))}"
        for wf, holds in sorted(by_workflow.items()) if len(holds) > 1
    ]  # fmt: skip
    doubles = []
    for attendee, holds in sorted(by_attendee.items()):
        holds.sort(key=lambda h: h.start)
        for i, first in enumerate(holds):
            for later in holds[i + 1 :]:
                if later.start >= first.end:
                    break
                doubles.append(f"attendee {attendee}: {first.id} [{first.start}, {first.end}) "
                               f"overlaps {later.id} [{later.start}, {later.end})")  # fmt: skip
    return duplicates, doubles


def _beliefs(tracks: Sequence[Track], snapshot: Snapshot, now: datetime) -> list[str]:
    """Where an agent's outcome and the store disagree."""
    status = {h.id: h.status for h in snapshot.holds}
    wanted = {"landed": HoldStatus.COMMITTED, "compensated": HoldStatus.RELEASED}
    live: dict[str, list[str]] = defaultdict(list)  # workflow -> its live or committed holds
    for hold in snapshot.holds:
        if hold.blocks_at(now):
            live[hold.workflow_id or ""].append(hold.id)
    out = []
    for t in tracks:
        held = sorted(live.get(t.intent.workflow, ()))
        if t.outcome == "refused" and held:  # refused, yet it holds
            out.append(f"intent {t.intent.workflow} refused ({t.reason}), yet the store has "
                       f"live or committed {', '.join(held)}")  # fmt: skip
        want = wanted.get(t.outcome)
        if want is not None and status.get(t.hold_id or "") != want:
            out.append(f"intent {t.intent.workflow} {t.outcome} on {t.hold_id}, "
                       f"which the store has {status.get(t.hold_id or '', 'missing')}")  # fmt: skip
    return out


def summarize(
    tracks: Sequence[Track], snapshot: Snapshot, now: datetime, *, tenant: str,
    history: Sequence[str], server_errors: int, calls: int, kills: int, seconds: float,
    settings: Mapping[str, Any], server_crashes: Sequence[str] = (),
) -> tuple[dict[str, Any], list[str]]:  # fmt: skip
    """The report (:data:`KEYS`, then ``settings``, ``faults``, ``ok``) and the violations."""
    duplicates, doubles = store_faults(snapshot, now, tenant)
    outcomes = Counter(t.outcome for t in tracks)
    refused = Counter(str(t.reason) for t in tracks if t.outcome == "refused")
    open_ = [t for t in tracks if not t.settled]
    problems = [*duplicates, *doubles, *history, *_beliefs(tracks, snapshot, now)]
    problems += [f"intent {t.intent.workflow} ended {t.outcome}: {t.reason}" for t in open_]
    if server_errors:
        problems.append(f"{server_errors} answers were server errors (5xx other than 503)")
    problems += [f"the server {crash}" for crash in server_crashes]
    times = sorted(t.ms for t in tracks if t.ms is not None)
    retries = [t.retries for t in tracks]
    report: dict[str, Any] = {
        "intents": len(tracks),
        "landed": outcomes["landed"] + outcomes["compensated"],
        "compensated": outcomes["compensated"],
        "refused": dict(sorted(refused.items())),
        "unresolved": len(open_),
        "duplicates": len(duplicates),
        "double_bookings": len(doubles),
        "history_violations": len(history),
        "server_errors": server_errors,
        "server_crashes": len(server_crashes),
        "retries_per_intent": round(sum(retries) / len(retries), 2) if retries else 0.0,
        "retries_max": max(retries, default=0),
        "p50_ms": round(percentile(times, 0.5), 1),
        "p99_ms": round(percentile(times, 0.99), 1),
        "calls": calls,
        "kills": kills,
        "seconds": round(seconds, 1),
        "settings": dict(settings),
        "faults": dict(sorted(Counter(f for t in tracks for f in t.injected).items())),
        "ok": not problems,
    }
    return report, problems


def print_summary(report: Mapping[str, Any], problems: Sequence[str], out: IO[str]) -> None:
    """The report as a table, then every violation (at most 50 shown) and the verdict."""
    s = report["settings"]
    print(f"slotward bench chaos: {s['agents']} agents x {s['intents']} intents, db {s['db']}, "
          f"{s['workers']} worker(s), kill every {s['kill_every'] or '-'} s, seed {s['seed']}, "
          f"think {s['think']} s",
          file=out)  # fmt: skip
    for key in KEYS:
        value = report[key]
        if key == "refused":
            said = ", ".join(f"{why} {n}" for why, n in value.items())
            value = f"{sum(value.values())}" + (f" ({said})" if said else "")
        print(f"  {key:<20} {value}", file=out)
    faults = ", ".join(f"{name} {n}" for name, n in report["faults"].items())
    print(f"  {'faults injected':<20} {faults or '-'}", file=out)
    print(file=out)
    for line in problems[:50]:
        print(f"VIOLATION {line}", file=out)
    if len(problems) > 50:
        print(f"... and {len(problems) - 50} more", file=out)
    verdict = "every intent landed or refused; 0 duplicates, 0 double bookings, history consistent"
    print(f"invariants: {'OK: ' + verdict if not problems else f'{len(problems)} violations'}",
          file=out)  # fmt: skip


def write_json(report: Mapping[str, Any], path: Path) -> None:
    path.write_text(json.dumps(report, indent=2) + "\n")
