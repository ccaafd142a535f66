"""`slotward bench pair` run for real: two trees' servers, in turns, each checked.

The ``before`` tree is a copy of this one whose package writes where it was
imported from (an environment variable names the file): so the test sees that
the ``before`` side's keys and server ran that tree's code, and nothing else
did. Nothing here asserts a speed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from slotward.benchmarks.pair import own_tree
from tests.e2e.test_bench import BENCH, _history, _measured, _target

MARK = "SLOTWARD_TEST_IMPORT_MARK"
_MARKER = f"""
import os as _os
if "{MARK}" in _os.environ:
    with open(_os.environ["{MARK}"], "a") as _mark:
        _mark.write(__file__ + "\\n")
"""


def _copy_of_this_tree(into: Path) -> Path:
    """This tree's package, copied whole (its symlinks followed), marking its imports."""
    shutil.copytree(own_tree() / "slotward", into / "slotward",
                    ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    with (into / "slotward" / "__init__.py").open("a") as init:
        init.write(_MARKER)
    return into


def test_pair_runs_each_side_from_its_own_tree(tmp_path: Path) -> None:
    before = _copy_of_this_tree(tmp_path / "before")
    mark, out = tmp_path / "imports", tmp_path / "out.json"
    done = subprocess.run(
        [*BENCH, "pair", "--before", str(before), "--requests", "200", "--concurrency", "8",
         "--json", str(out)],
        capture_output=True, text=True, timeout=600, check=False,
        env={**os.environ, MARK: str(mark)},
    )  # fmt: skip
    found = _measured(done, out)
    assert list(found) == ["before-creates", "after-creates", "before-replays", "after-replays"]
    for side in ("before", "after"):
        assert found[f"{side}-creates"]["replayed"] == 0
        assert found[f"{side}-replays"]["replayed"] == found[f"{side}-replays"]["requests"] == 200
        fresh, again = found[f"{side}-creates"], found[f"{side}-replays"]
        cpu = fresh["server_cpu_us_per_call"] / again["server_cpu_us_per_call"]
        assert again["cpu_ratio_to_fresh"] == pytest.approx(cpu, rel=0.01)
        assert _history(done, f"history ({side})") > 2 * 200  # its warm-up, creates, replays
    for what in ("creates", "replays"):
        after, first = found[f"after-{what}"], found[f"before-{what}"]
        cpu = after["server_cpu_us_per_call"] / first["server_cpu_us_per_call"]
        assert after["cpu_ratio_to_before"] == pytest.approx(cpu, rel=0.01)
    assert _target(done, "after: replays / fresh creates, by server CPU")[1:] == (">=", "3")
    # The before side's key maker and server imported the copy; nothing imported it else.
    imported = mark.read_text().splitlines()
    assert len(imported) >= 2, imported
    assert all(Path(line).is_relative_to(before) for line in imported), imported


def test_pair_refuses_a_tree_without_slotward(tmp_path: Path) -> None:
    done = subprocess.run([*BENCH, "pair", "--before", str(tmp_path)],
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert f"--before {tmp_path}: no slotward package there" in done.stderr
    assert not list(tmp_path.iterdir())  # nothing started, nothing written


def _effect(done: subprocess.CompletedProcess[str], what: str) -> tuple[float, float]:
    """The e and b of the effect note on ``what``."""
    notes = [n for n in done.stdout.splitlines() if n.startswith(f"note: {what}: --after's")]
    assert len(notes) == 1, done.stdout
    return float(notes[0].split("e = ")[1].split()[0]), float(notes[0].split("b = ")[1].split()[0])


def test_pair_runs_both_ways_round_and_reads_the_effect_apart_from_the_lean(
    tmp_path: Path,
) -> None:
    before = _copy_of_this_tree(tmp_path / "before")
    out = tmp_path / "out.json"
    done = subprocess.run(
        [*BENCH, "pair", "--before", str(before), "--runs", "2", "--requests", "200",
         "--concurrency", "8", "--json", str(out)],
        capture_output=True, text=True, timeout=900, check=False,
    )  # fmt: skip
    found = _measured(done, out)
    assert list(found) == [
        f"{run}:{side}-{what}"
        for run in ("1", "2~")
        for what in ("creates", "replays")
        for side in ("before", "after")
    ]
    swapped = "run 2~ (swapped: its before is --after's tree)"
    for said in ("run 1", swapped):
        for side in ("before", "after"):
            checked = [n for n in done.stdout.splitlines()
                       if n.startswith(f"note: {said}: history ({side}): ")]  # fmt: skip
            assert len(checked) == 1, done.stdout
            assert checked[0].endswith(" 0 violations"), checked
    for what in ("creates", "replays"):
        e, b = _effect(done, what)
        # A run as given reads e * b; swapped, b / e (benchmarks/pair_runs.py).
        given = found[f"1:after-{what}"]["cpu_ratio_to_before"]
        back = found[f"2~:after-{what}"]["cpu_ratio_to_before"]
        assert e * b == pytest.approx(given, rel=0.01)
        assert b / e == pytest.approx(back, rel=0.01)


def test_pair_runs_refuses_a_count_that_cannot_be_read_both_ways(tmp_path: Path) -> None:
    done = subprocess.run([*BENCH, "pair", "--before", str(own_tree()), "--runs", "0"],
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert "--runs is 1, or at least 2" in done.stderr
