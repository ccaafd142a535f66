"""Two scenarios cut into slices, run in turns and put back together (benchmarks/interleave.py)."""

from __future__ import annotations

from typing import Any

import pytest

from slotward.benchmarks.interleave import in_turns, merged, slices_for, split
from slotward.benchmarks.plans import Phase


def _phase(name: str, calls: int) -> Phase:
    tasks = [[[{"op": "post", "path": "/p", "body": {"n": n}}]] for n in range(calls)]
    return {"name": name, "base": "http://127.0.0.1:1", "tasks": tasks, "concurrency": 4}


def _answer(name: str, *, requests: int, start: float, end: float, **more: Any) -> dict[str, Any]:
    return {
        "name": name, "requests": requests, "seconds": 1.0, "latencies_ms": [float(requests)],
        "statuses": {"201": requests}, "errors": 0, "error_samples": [], "skipped": 0,
        "replayed": 0, "codes": {}, "cpu_seconds": 0.5, "server_cpu_seconds": end - start,
        "server_cpu_start": start, "server_cpu_end": end, "stopped_early": False,
        "records": [name], **more,
    }  # fmt: skip


def test_slices_run_a_b_b_a_and_each_side_keeps_its_calls_in_order() -> None:
    turns = in_turns(_phase("creates", 10), _phase("reference", 10), 4)
    assert [t["name"] for t in turns] == [
        "reference#open",
        "creates#0", "reference#0", "reference#1", "creates#1",
        "creates#2", "reference#2", "reference#3", "creates#3",
        "reference#close",
    ]  # fmt: skip
    for side in ("creates", "reference"):
        mine = [t for t in turns if t["name"].startswith(side) and t["tasks"]]
        assert [len(t["tasks"]) for t in mine] == [2, 3, 2, 3]
        sent = [c["body"]["n"] for t in mine for task in t["tasks"] for step in task for c in step]
        assert sent == list(range(10))  # every call once, in order
        # Only a side's last slice waits after its last answer (the plan's default).
        assert [t.get("settle_seconds") for t in mine] == [0, 0, 0, None]


def test_one_slice_is_the_two_phases_one_after_the_other() -> None:
    turns = in_turns(_phase("creates", 3), _phase("reference", 3), 1)
    assert [(t["name"], len(t["tasks"]), t.get("settle_seconds")) for t in turns] == [
        ("reference#open", 0, 0), ("creates#0", 3, None), ("reference#0", 3, None),
        ("creates#close", 0, 0),
    ]  # fmt: skip
    with pytest.raises(ValueError, match="at least 1"):
        in_turns(_phase("creates", 3), _phase("reference", 3), 0)


@pytest.mark.parametrize(
    ("requests", "slices"), [(10, 1), (999, 1), (1000, 2), (3000, 4), (10**6, 4)]
)
def test_a_short_run_is_cut_in_fewer_slices(requests: int, slices: int) -> None:
    assert slices_for(requests) == slices


def test_merged_adds_the_slices_up_and_reads_the_cpu_over_the_whole_span() -> None:
    answers = [
        _answer("creates#0", requests=2, start=10.0, end=10.5),
        _answer("reference#0", requests=2, start=3.0, end=3.2),
        _answer("reference#1", requests=3, start=3.2, end=3.4),
        # creates' deferred work fell while the reference ran: 11.5, not 10.5, at its next start
        _answer("creates#1", requests=3, start=11.5, end=12.0, codes={"slot_conflict": 1}),
    ]
    sides = split(answers)
    assert list(sides) == ["creates", "reference"]
    creates = merged("creates", sides["creates"])
    assert creates["server_cpu_seconds"] == pytest.approx(2.0)  # 12.0 - 10.0, not 0.5 + 0.5
    assert (creates["requests"], creates["seconds"], creates["slices"]) == (5, 2.0, 2)
    assert creates["latencies_ms"] == [2.0, 3.0]
    assert creates["statuses"] == {"201": 5}
    assert creates["codes"] == {"slot_conflict": 1}
    assert creates["records"] == ["creates#0", "creates#1"]
    assert merged("reference", sides["reference"])["server_cpu_seconds"] == pytest.approx(0.4)


def test_both_sides_cpu_spans_the_whole_run() -> None:
    """Each server's CPU is read from the run's first slice to its last: the same
    span for both, so an idle background counts the same on either side."""
    turns = in_turns(_phase("before", 4), _phase("after", 4), 2)
    assert [t["name"] for t in turns] == [
        "after#open", "before#0", "after#0", "after#1", "before#1", "after#close",
    ]  # fmt: skip
    # Two servers busy alike, 1 CPU second per second of the run, whoever is
    # driven: a slice takes 1 s, an empty phase none; the readings the clock's.
    answers, clock = [], 0.0
    for t in turns:
        took = 1.0 if t["tasks"] else 0.0
        answers.append(_answer(t["name"], requests=len(t["tasks"]), start=clock, end=clock + took))
        clock += took
    sides = split(answers)
    before, after = merged("before", sides["before"]), merged("after", sides["after"])
    assert before["server_cpu_seconds"] == after["server_cpu_seconds"] == pytest.approx(4.0)
    assert (before["requests"], before["slices"], before["seconds"]) == (4, 2, 2.0)
    assert (after["requests"], after["slices"], after["seconds"]) == (4, 2, 2.0)
    assert after["records"] == ["after#0", "after#1"]
    with pytest.raises(ValueError, match="only the run's ends"):
        merged("after", [answers[0]])


def test_a_slice_without_a_reading_leaves_the_cpu_unknown() -> None:
    answers = [
        _answer("creates#0", requests=1, start=1.0, end=2.0),
        {**_answer("creates#1", requests=1, start=2.0, end=3.0), "server_cpu_start": None},
    ]
    assert merged("creates", answers)["server_cpu_seconds"] is None
    with pytest.raises(ValueError, match="not a slice"):
        split([_answer("creates", requests=1, start=0.0, end=1.0)])
    with pytest.raises(ValueError, match="no slices"):
        merged("creates", [])
