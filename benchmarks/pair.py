"""``slotward bench pair``: one source tree's slotward against another's, in one run.

Issue 16 asks for each change to be measured against the one before it in the
same run. A change to the hot path moves a call's CPU by a few percent, while
this shared machine moves the same figure by 10-30% between runs a minute
apart (docs/performance.md): two runs of ``bench throughput``, one per commit,
cannot tell such a change from noise. So this runs both in one:

- two ``slotward serve``, one from each tree (run in it, with
  ``PYTHONPATH=<tree>``: ``python -m`` imports from its directory first), each on
  a fresh database of ``--db``'s kind, both up the whole time;
- ``creates``: N fresh creates on each, cut into slices run in turns
  (A B B A ..., benchmarks/interleave.py), one server driven at a time;
- ``replays``: the same N calls again on each, in turns too: each is replayed.

Reported: each side's rows (``before-creates``, ``after-creates``,
``before-replays``, ``after-replays``), and in the notes the ratios that decide a
change: after / before by server CPU per create and per replay, and each
side's fresh create's CPU over its replay's. The issue's replay target is
judged on the ``after`` side. Every call of both sides is recorded and held
against its own database by the history checker.

``--before DIR``: a tree holding the ``slotward`` package to compare against
(``git worktree add /tmp/before HEAD~1``, say). ``--after DIR``: the other,
by default the tree this ``slotward`` runs from. Each side's API keys are made
by its own code (a ``python -c`` with its ``PYTHONPATH``), so a tree whose
schema differs still opens its own database.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import slotward
from slotward.benchmarks.baseline import check_warmup, plan, warm_count
from slotward.benchmarks.interleave import in_turns, merged, slices_for, split
from slotward.benchmarks.loadgen import drive
from slotward.benchmarks.plans import Call, Phase, fresh_creates, future_start, one_per_task, phase
from slotward.benchmarks.plans import warmup_phase as warmup
from slotward.benchmarks.recording import calls_of, check_history
from slotward.benchmarks.results import Outcome, Result, Settings, Target, cpu_ratio
from slotward.benchmarks.servers import ServerFailed, server_env, slotward_server, workspace
from slotward.benchmarks.throughput import bench_agents, replay_problem
from slotward.engine.model import Principal

__all__ = ["SIDES", "own_tree", "pair", "source_tree"]

SIDES = ("before", "after")

# Run with a side's PYTHONPATH: its own code makes its keys (argv: the URL, the
# principals as JSON); the secrets come back on stdout, never through a log.
_MAKE_KEYS = """\
import json, sys
from slotward.benchmarks.servers import make_keys
from slotward.engine.model import Principal
made = make_keys(sys.argv[1], [Principal(*p) for p in json.loads(sys.argv[2])])
print(json.dumps(made))
"""


@dataclass(frozen=True)
class _Side:
    name: str
    url: str
    base: str
    first_key: int  # its keys' place in the plan's list: the other side's come first


def own_tree() -> Path:
    """The tree this ``slotward`` package is imported from."""
    return Path(slotward.__file__).resolve().parent.parent


def source_tree(path: Path, flag: str) -> Path:
    """``path`` if it holds a ``slotward`` package, else ValueError naming ``flag``."""
    tree = path.expanduser().resolve()
    if not (tree / "slotward" / "__init__.py").is_file():
        raise ValueError(f"{flag} {path}: no slotward package there ({flag} DIR takes the "
                         "directory that holds slotward/, a git worktree's root)")  # fmt: skip
    return tree


def pair(settings: Settings, before: Path, after: Path | None = None) -> Outcome:
    outcome = Outcome("pair", settings)
    trees = (source_tree(before, "--before"),
             own_tree() if after is None else source_tree(after, "--after"))  # fmt: skip
    c, s = settings.concurrency, settings.seconds
    agents = bench_agents(settings)
    creates = fresh_creates(settings.requests, future_start(), c)
    with workspace(settings.db) as databases:
        with contextlib.ExitStack() as servers:  # stopped before the history is read
            sides: list[_Side] = []
            keys: list[str] = []
            for name, tree in zip(SIDES, trees, strict=True):
                url = databases.fresh(name)
                first_key = len(keys)
                keys += _keys(tree, url, agents)
                with server_env({"PYTHONPATH": str(tree)}):
                    base = servers.enter_context(
                        slotward_server(url, settings.workers, databases.workdir, cwd=tree)
                    )
                sides.append(_Side(name, url, base, first_key))
            warm = _warm_ups(settings, sides)
            measured: list[Phase] = []
            for scenario in ("creates", "replays"):
                a, b = (phase(f"{side.name}-{scenario}", side.base,
                              one_per_task(creates), concurrency=c, seconds=s, expect=(201,),
                              record=True) for side in sides)  # fmt: skip
                turns = slices_for(len(creates))
                measured += in_turns(a, _shifted(b, sides[1].first_key), turns)
            answer = drive(plan(settings, [*warm, *measured], keys))
        answered: list[Mapping[str, Any]] = answer["phases"]
        check_warmup(outcome, answered[: len(warm)])
        parts = split(answered[len(warm) :])
        done = {name: merged(name, slices) for name, slices in parts.items()}
        results = {name: outcome.add(Result.of(name, done[name], settings, c), done[name])
                   for name in (f"{side}-{what}" for what in ("creates", "replays")
                                for side in SIDES)}  # fmt: skip
        for n, side in enumerate(sides):
            fresh, again = done[f"{side.name}-creates"], done[f"{side.name}-replays"]
            problem = replay_problem(fresh, again)
            if problem is not None:
                outcome.problems.append(f"{side.name}: {problem}")
            # Its warm creates (the second of its two warm-up phases), then its scenarios.
            mine = [answered[2 * n + 1], fresh, again]
            calls = [call for p in mine for call in calls_of(p["records"], agents * len(sides))]
            check_history(outcome, side.url, calls, label=side.name)
    outcome.targets += _ratios(outcome, results, int(done["after-creates"]["slices"]))
    return outcome


def _warm_ups(settings: Settings, sides: Sequence[_Side]) -> list[Phase]:
    """Each side's warm-up (its keys checked, its creates path warmed), with its keys."""
    c = settings.concurrency
    rounds = 1 if settings.workers == 1 else 2 * settings.workers
    warm: list[Phase] = []
    for side in sides:
        phases = warmup(side.base, c, c, future_start(), creates=warm_count(settings),
                        rounds=rounds, record=True)  # fmt: skip
        warm += [_shifted(p, side.first_key) for p in phases]
    return warm


def _keys(tree: Path, url: str, agents: Sequence[Principal]) -> list[str]:
    """Keys for ``agents`` in the database at ``url``, made by ``tree``'s own code."""
    doc = json.dumps([[p.tenant, p.agent_id, p.role, p.priority] for p in agents])
    env = {**os.environ, "PYTHONPATH": str(tree)}
    # Run in the tree: ``python -c`` imports from its directory before PYTHONPATH.
    made = subprocess.run([sys.executable, "-c", _MAKE_KEYS, url, doc], env=env, cwd=tree,
                          capture_output=True, text=True, timeout=300, check=False)  # fmt: skip
    if made.returncode != 0:
        tail = made.stderr.strip().splitlines()[-1:] or ["(no output)"]
        raise ServerFailed(f"{tree}: could not make its API keys: {tail[0]}")
    secrets: list[str] = json.loads(made.stdout)
    return secrets


def _shifted(spec: Phase, by: int) -> Phase:
    """``spec`` with every call's key index moved ``by`` places: the other side's keys."""
    if not by:
        return spec
    tasks = [[[_moved(call, by) for call in step] for step in task] for task in spec["tasks"]]
    return {**spec, "tasks": tasks}


def _moved(call: Call, by: int) -> Call:
    return {**call, "key": int(call["key"]) + by} if "key" in call else call


def _ratios(outcome: Outcome, results: Mapping[str, Result], slices: int) -> list[Target]:
    """The ratios in the results' extras and the notes; the replay target, after's side."""
    shown: dict[str, float | None] = {}
    for what in ("creates", "replays"):
        after = results[f"after-{what}"]
        shown[what] = after.extra["cpu_ratio_to_before"] = cpu_ratio(
            after, results[f"before-{what}"]
        )
    fresh: dict[str, float | None] = {}
    for side in SIDES:
        again = results[f"{side}-replays"]
        fresh[side] = again.extra["cpu_ratio_to_fresh"] = cpu_ratio(results[f"{side}-creates"],
                                                                    again)  # fmt: skip
    outcome.notes.append(f"both servers ran in turns, {slices} slice(s) a scenario each "
                         "(A B B A ...): their ratios see the same machine")  # fmt: skip
    outcome.notes.append("server CPU per call, after / before (below 1: after costs less): "
                         f"creates {_shown(shown['creates'], 3)}, "
                         f"replays {_shown(shown['replays'], 3)}")  # fmt: skip
    outcome.notes.append(
        "a fresh create's server CPU / a replay's: "
        f"before {_shown(fresh['before'], 2)}, after {_shown(fresh['after'], 2)}"
    )
    measured = fresh["after"]
    return [
        Target(
            "after: replays / fresh creates, by server CPU (a create's us/call / a replay's)",
            float("nan") if measured is None else measured,
            3.0,
            True,
        )
    ]


def _shown(value: float | None, digits: int) -> str:
    return "not measured" if value is None else f"{value:.{digits}f}"
