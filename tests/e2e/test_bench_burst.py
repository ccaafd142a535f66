"""`slotward bench burst` run for real with a small burst: what a user reads and parses.

No speed is asserted: only that every create of every burst was answered 201,
the figures are consistent, the reference was sent the same bursts, and the
history was checked.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.test_bench import _bench, _history, _measured, _target


def test_burst_serves_every_never_seen_key_and_checks_the_history(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    done = _bench("burst", "--concurrency", "40", "--requests", "80", "--json", str(out))
    found = _measured(done, out)
    assert list(found) == ["burst", "reference"]
    mine, reference = found["burst"], found["reference"]
    assert mine["statuses"] == reference["statuses"] == {"201": 80}  # two bursts of 40
    assert (mine["bursts"], mine["concurrency"], mine["replayed"]) == (2, 40, 0)
    assert mine["max_ms"] >= mine["p99_ms"]
    assert 0 <= mine["sent_within_ms"] < mine["max_ms"]  # sent together, not one by one
    assert f"burst: each burst's 40 creates were sent within {mine['sent_within_ms']:.1f} ms" in (
        done.stdout)  # fmt: skip
    assert mine["p99_ratio_to_reference"] == pytest.approx(
        mine["p99_ms"] / reference["p99_ms"], rel=0.01)  # fmt: skip
    assert mine["cpu_ratio_to_reference"] == pytest.approx(
        mine["server_cpu_us_per_call"] / reference["server_cpu_us_per_call"], rel=0.01)  # fmt: skip
    measured, sign, goal = _target(done, "40 never-seen keys arriving together: answered 201")
    assert (measured, sign, goal) == (1.0, ">=", "1")
    assert _history(done, "history") > 80  # the warm-up's creates too
