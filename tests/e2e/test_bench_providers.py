"""`slotward bench providers` run for real with tiny sizes, on a real Radicale.

No speed is asserted: only that every claim was answered, the bound claims
were decided on a fresh mirror (none read the calendar), each bound hold's
event was written to its calendar once, the mirror holds exactly the
calendar's instances in the window read, the history checker found nothing,
and the ratios are reported as the target says.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from slotward.benchmarks.radicale import MISSING_RADICALE
from tests.e2e.test_bench import BENCH, _bench, _measured


def test_providers_reports_bound_against_unbound_claims_and_the_mirror(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    done = _bench("providers", "--requests", "40", "--concurrency", "4", "--events", "60",
                  "--series", "5", "--json", str(out))  # fmt: skip
    found = _measured(done, out)
    assert list(found) == ["bound", "readonly", "unbound", "mirror"]
    bound, unbound, mirror = found["bound"], found["unbound"], found["mirror"]
    readonly = found["readonly"]
    assert bound["statuses"] == readonly["statuses"] == unbound["statuses"] == {"201": 40}
    # The mirror was fresh for every claim: none read its calendar.
    assert bound["claims_read_provider"] == readonly["claims_read_provider"] == 0
    assert bound["provider_reads"] == readonly["provider_reads"] == 0
    assert unbound["provider_reads"] == 0
    assert bound["calendar_writes"] == 40  # one event per bound hold
    assert readonly["calendar_writes"] == 0  # an ICS calendar is read-only
    assert readonly["p50_ratio_to_unbound"] == pytest.approx(
        readonly["p50_ms"] / unbound["p50_ms"], rel=0.01)  # fmt: skip
    assert bound["p50_ratio_to_unbound"] == pytest.approx(
        bound["p50_ms"] / unbound["p50_ms"], rel=0.01)  # fmt: skip
    assert bound["p99_ratio_to_unbound"] == pytest.approx(
        bound["p99_ms"] / unbound["p99_ms"], rel=0.01)  # fmt: skip
    assert (mirror["events"], mirror["series"], mirror["requests"]) == (60, 5, 3)
    assert mirror["busy_blocks_per_read"] == [mirror["expected_blocks"]] * 3
    assert mirror["busy_blocks"] > 55  # the 55 singles, and the series' instances
    assert mirror["mirror_seconds"] > 0
    assert "bound claim p50 / unbound, fresh mirror, at 4 agents" in done.stdout
    assert "read-only (ics) bound claim p50 / unbound" in done.stdout
    assert "0 violations" in done.stdout  # the history checker ran


def test_providers_says_how_to_install_radicale_when_it_is_missing(tmp_path: Path) -> None:
    # A sitecustomize that hides the installed Radicale from the benchmark's process.
    (tmp_path / "sitecustomize.py").write_text("import sys\nsys.modules['radicale'] = None\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    done = subprocess.run([*BENCH, "providers"], capture_output=True, text=True, timeout=120,
                          check=False, env=env)  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    assert MISSING_RADICALE in done.stderr
