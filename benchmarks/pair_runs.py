"""``slotward bench pair --runs N``: a change's effect read from runs both ways round.

One ``bench pair`` run tells a change of some 10%; a smaller one hides in
this machine's noise, and in whatever lean the bench itself has towards one
side (docs/performance.md, eleventh pass: the spans' asymmetry read "after"
as some 4% cheaper until it was mended). So this runs the pair N times, every
second run with the trees swapped, and reads both from the two orientations.
A run as given reads after / before = e * b, where e is the change's own
effect (the ``--after`` tree's server CPU over the ``--before`` tree's) and b
the bench's own lean (1: none; below 1, the side run second, "after", reads
cheaper than it is); swapped, it reads b / e. So, from the medians of each orientation, g and s:

    e = sqrt(g / s),    b = sqrt(g * s).

The rows and notes of every run are kept, named ``<run>:<scenario>`` and
``run <run>: <note>``; a swapped run's number carries a ``~`` (its ``before``
side is the ``--after`` tree). A run's own targets are left out: the effect
is the figure.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from slotward.benchmarks.pair import own_tree, pair, source_tree
from slotward.benchmarks.results import Outcome, Settings

__all__ = ["WHAT", "effect", "pair_runs"]

WHAT = ("creates", "replays")


def effect(given: Sequence[float], swapped: Sequence[float]) -> tuple[float, float]:
    """(e, b) from the after / before ratios of the runs as given and swapped."""
    if not given or not swapped:
        raise ValueError("the effect needs runs both ways round")
    g, s = statistics.median(given), statistics.median(swapped)
    return math.sqrt(g / s), math.sqrt(g * s)


def pair_runs(settings: Settings, before: Path, after: Path | None, runs: int) -> Outcome:
    """``runs`` pairs of ``before`` and ``after`` (at least two), every second swapped."""
    if runs < 2:
        raise ValueError("--runs is 1, or at least 2: a run as given and one swapped")
    trees = (source_tree(before, "--before"),
             own_tree() if after is None else source_tree(after, "--after"))  # fmt: skip
    outcome = Outcome("pair", settings)
    ratios: dict[str, tuple[list[float], list[float]]] = {w: ([], []) for w in WHAT}
    for n in range(1, runs + 1):
        swapped = n % 2 == 0
        once = pair(settings, *(trees[::-1] if swapped else trees))
        mark = f"{n}~" if swapped else str(n)
        said = f"run {mark}" + (" (swapped: its before is --after's tree)" if swapped else "")
        outcome.results += [replace(r, scenario=f"{mark}:{r.scenario}") for r in once.results]
        outcome.problems += [f"{said}: {problem}" for problem in once.problems]
        outcome.notes += [f"{said}: {note}" for note in once.notes]
        read = {r.scenario: r.extra.get("cpu_ratio_to_before") for r in once.results}
        for what in WHAT:
            value = read.get(f"after-{what}")
            if value is not None:
                given, back = ratios[what]
                (back if swapped else given).append(float(value))
    for what, (given, back) in ratios.items():
        if given and back:
            e, b = effect(given, back)
            outcome.notes.append(
                f"{what}: --after's tree / --before's by server CPU, e = {e:.3f} "
                f"(below 1: --after's costs less); the bench's own lean, b = {b:.3f} "
                f"(1: none; below 1: the side run second reads cheaper); from "
                f"{len(given)} run(s) as given and {len(back)} swapped"
            )
        else:
            outcome.notes.append(f"{what}: not measured both ways round: no effect read")
    return outcome
