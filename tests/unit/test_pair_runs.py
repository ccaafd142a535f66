"""bench pair --runs: a change's effect and the bench's lean, read from both orientations."""

from __future__ import annotations

from pathlib import Path

import pytest

from slotward.benchmarks.pair_runs import WHAT, effect, pair_runs
from slotward.benchmarks.results import Outcome, Result, Settings


@pytest.mark.parametrize(("e", "b"), [(0.97, 1.0), (1.0, 0.956), (1.034, 1.003), (0.9, 1.1)])
def test_a_run_reads_e_times_b_and_swapped_b_over_e(e: float, b: float) -> None:
    given, swapped = [e * b] * 3, [b / e] * 2
    found = effect(given, swapped)
    assert found == pytest.approx((e, b))


def test_the_orientations_medians_are_what_is_read() -> None:
    # An outlier each way moves nothing: the medians are 0.96 and 1.00.
    e, b = effect([0.96, 0.50, 0.97, 0.95, 1.40], [1.00, 1.20, 0.99, 1.01, 0.10])
    assert e == pytest.approx((0.96 / 1.00) ** 0.5)
    assert b == pytest.approx((0.96 * 1.00) ** 0.5)


def test_the_same_lean_both_ways_is_no_effect() -> None:
    # Two copies of one tree, read 4% cheaper on whichever side runs second.
    e, b = effect([0.96, 0.96], [0.96])
    assert e == pytest.approx(1.0)
    assert b == pytest.approx(0.96)


def test_one_way_round_alone_tells_nothing() -> None:
    with pytest.raises(ValueError, match="both ways round"):
        effect([0.97], [])
    with pytest.raises(ValueError, match="both ways round"):
        effect([], [1.03])


def _tree(root: Path, name: str) -> Path:
    (root / name / "slotward").mkdir(parents=True)
    (root / name / "slotward" / "__init__.py").write_text("")
    return root / name


def test_every_second_run_swaps_the_trees_and_the_notes_read_the_effect(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The orchestration alone (a real run of each pair: tests/e2e/test_bench_pair.py):
    which tree each run puts first, and what it makes of the runs' ratios."""
    before, after = _tree(tmp_path, "before"), _tree(tmp_path, "after")
    cost = {before: 100.0, after: 90.0}  # the change: 10% cheaper
    lean = 0.96  # the bench reads its second side 4% cheaper
    given: list[tuple[Path, Path]] = []

    def one_pair(settings: Settings, first: Path, second: Path | None = None) -> Outcome:
        assert second is not None
        given.append((first, second))
        done = Outcome("pair", settings, problems=["a call failed"], notes=["history: fine"])
        for what in WHAT:
            for side, tree in (("before", first), ("after", second)):
                ratio = {"cpu_ratio_to_before": cost[tree] / cost[first] * lean}
                done.results.append(Result(f"{side}-{what}", 1, 1.0, 1.0, 1.0, 1.0, 1.0, 0, 1,
                                           "sqlite", 1, 0.1, cost[tree], extra=ratio))  # fmt: skip
        return done

    monkeypatch.setattr("slotward.benchmarks.pair_runs.pair", one_pair)
    outcome = pair_runs(Settings(), before, after, 3)
    assert given == [(before, after), (after, before), (before, after)]
    assert [r.scenario for r in outcome.results][:5] == [
        "1:before-creates", "1:after-creates", "1:before-replays", "1:after-replays",
        "2~:before-creates",
    ]  # fmt: skip
    assert len(outcome.results) == 12
    assert outcome.problems[1] == "run 2~ (swapped: its before is --after's tree): a call failed"
    assert "run 3: history: fine" in outcome.notes
    for what in WHAT:
        (note,) = [n for n in outcome.notes if n.startswith(f"{what}: --after's")]
        assert "e = 0.900" in note
        assert "b = 0.960" in note
        assert "from 2 run(s) as given and 1 swapped" in note


def test_fewer_than_two_runs_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least 2"):
        pair_runs(Settings(), _tree(tmp_path, "before"), None, 1)
