"""Two scenarios measured in turns, so that their ratio does not carry the machine's drift.

A ratio of two scenarios measured one after the other carries whatever the
shared machine did between them: the reference's CPU per create moved from
207 to 300 us in runs a minute apart here (docs/performance.md), and with it
the ratio to it. So a target's two sides are cut into slices, run in turns
A B B A A B B A (each side as often first as second), both servers up the
whole time, each on its own database, only one of them driven at a time.

Each side is then put back together (:func:`merged`): its calls, its
latencies, its seconds of work; and its server's CPU read over the whole run,
the same span for both: from the first slice's start to the last slice's end,
whichever side's they are. The side that does not start the run opens it with
an empty phase (no calls: a reading of its server's CPU), and the side that
does not end it closes it with one. The span holds the other side's slices,
so whatever a server does after answering (slotward's relay, its storm watch)
is its own wherever it falls, and so is its idle background while the other
side runs (some 8 ms a second for slotward, about none for the reference): an
error against the server that has one, but the same for two slotwards
(``bench pair``). Spans of each side's own first and last slice gave the side
that starts and ends the run two slices and a settle more of idle background,
and ``bench pair`` read "after" as some 4% cheaper than it was
(docs/performance.md, eleventh pass). Only each side's last slice waits
``settle_seconds`` (benchmarks/baseline.py) after its last answer; the span
counts the others' tails.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from slotward.benchmarks.plans import Phase

__all__ = ["MIN_SLICE", "SLICES", "in_turns", "merged", "slices_for", "split"]

SLICES = 4  # a side's slices: two first, two second
MIN_SLICE = 500  # calls: a shorter run is cut in fewer slices (each ramps up and down)
_SEP = "#"
_OPEN, _CLOSE = "open", "close"  # the empty phases that read a server at the run's ends


def slices_for(requests: int) -> int:
    """How many slices each side of ``requests`` calls is cut into."""
    return max(1, min(SLICES, requests // MIN_SLICE))


def in_turns(first: Phase, second: Phase, slices: int) -> list[Phase]:
    """``first`` and ``second`` cut into ``slices`` slices each, in turns A B B A A B ...

    Their tasks are cut in order into slices of (nearly) equal length; a
    slice is named ``<name>#<i>``. Every slice but each side's last waits for
    nothing after its last answer (``settle_seconds`` 0). The run begins with
    ``<second>#open`` and ends with ``<first>#close`` or ``<second>#close``
    (whichever side's slice is not last): phases without calls, which read
    that side's server at the run's ends, so both sides' CPU spans the run.
    """
    if slices < 1:
        raise ValueError("slices must be at least 1")
    a, b = _cut(first, slices), _cut(second, slices)
    order: list[Phase] = []
    for i in range(slices):
        order += (a[i], b[i]) if i % 2 == 0 else (b[i], a[i])
    not_last = first if order[-1] is b[-1] else second
    return [_mark(second, _OPEN), *order, _mark(not_last, _CLOSE)]


def _mark(spec: Phase, end: str) -> Phase:
    return {**spec, "name": f"{spec['name']}{_SEP}{end}", "tasks": [], "settle_seconds": 0}


def _is_mark(answer: Mapping[str, Any]) -> bool:
    return str(answer["name"]).rpartition(_SEP)[2] in (_OPEN, _CLOSE)


def _cut(spec: Phase, slices: int) -> list[Phase]:
    tasks = spec["tasks"]
    bounds = [len(tasks) * i // slices for i in range(slices + 1)]
    cut = [
        {**spec, "name": f"{spec['name']}{_SEP}{i}", "tasks": tasks[lo:hi]}
        for i, (lo, hi) in enumerate(itertools.pairwise(bounds))
    ]
    for piece in cut[:-1]:
        piece["settle_seconds"] = 0
    return cut


def split(phases: Sequence[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """The load generator's answers of sliced phases, by their side's name, in run order."""
    sides: dict[str, list[Mapping[str, Any]]] = {}
    for answer in phases:
        name, sep, _ = str(answer["name"]).rpartition(_SEP)
        if not sep:
            raise ValueError(f"phase {answer['name']!r} is not a slice")
        sides.setdefault(name, []).append(answer)
    return sides


def merged(name: str, slices: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One side's slices (in run order) as one phase's answer (benchmarks/loadgen.py).

    ``server_cpu_seconds`` is read over the whole span (the module's docstring),
    its ends the run's own when the side has their empty phases; None when any
    slice has no reading. The empty phases count in nothing else.
    """
    if not slices:
        raise ValueError("no slices to merge")
    starts = [s.get("server_cpu_start") for s in slices]
    ends = [s.get("server_cpu_end") for s in slices]
    first, last = starts[0], ends[-1]
    spanned = None  # first and last are tested apart for the type checker's sake
    if first is not None and last is not None and None not in starts and None not in ends:
        spanned = float(last) - float(first)
    runs = [s for s in slices if not _is_mark(s)]
    if not runs:
        raise ValueError("no slices to merge, only the run's ends")
    return {
        "name": name,
        "slices": len(runs),
        "requests": sum(int(s["requests"]) for s in runs),
        "seconds": sum(float(s["seconds"]) for s in runs),
        "latencies_ms": sorted(x for s in runs for x in s["latencies_ms"]),
        "statuses": _summed(s["statuses"] for s in runs),
        "errors": sum(int(s["errors"]) for s in runs),
        "error_samples": [x for s in runs for x in s["error_samples"]],
        "skipped": sum(int(s["skipped"]) for s in runs),
        "replayed": sum(int(s["replayed"]) for s in runs),
        "codes": _summed(s["codes"] for s in runs),
        "cpu_seconds": sum(float(s["cpu_seconds"]) for s in runs),
        "server_cpu_seconds": spanned,
        "server_cpu_start": first,
        "server_cpu_end": last,
        "stopped_early": any(bool(s["stopped_early"]) for s in runs),
        "records": [r for s in runs for r in s["records"]],
    }


def _summed(counts: Any) -> dict[str, int]:
    total: Counter[str] = Counter()
    for c in counts:
        total.update({str(k): int(v) for k, v in c.items()})
    return dict(sorted(total.items()))
