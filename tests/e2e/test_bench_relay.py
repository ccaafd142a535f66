"""`slotward bench relay` run for real with tiny sizes: what a user reads and parses.

No speed is asserted: only that every event reached the receiver, the figures
are consistent, and the ratio and the lag are reported as the targets say.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.test_bench import _bench, _history, _measured


def test_relay_reports_its_rate_against_a_bare_client_and_its_lag(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    done = _bench("relay", "--requests", "60", "--concurrency", "8", "--json", str(out))
    found = _measured(done, out)
    assert list(found) == ["relay", "bare-client"]
    mine, bare = found["relay"], found["bare-client"]
    assert mine["requests"] == mine["events"] == 60  # every event delivered
    assert bare["requests"] == 60  # the same bodies posted again
    assert bare["statuses"] == {"200": 60}
    assert mine["ratio_to_bare_client"] == pytest.approx(
        mine["req_per_s"] / bare["req_per_s"], rel=0.01)  # fmt: skip
    assert (mine["lag_p50_ms"], mine["lag_p99_ms"]) == (mine["p50_ms"], mine["p99_ms"])
    assert mine["duplicates"] >= 0
    assert mine["creates_per_s"] > 0
    assert "relay events/s / bare aiohttp client" in done.stdout
    assert "commit-to-delivery lag p99, s, at 8 agents (target at 64)" in done.stdout
    assert _history(done, "history") == 2 * 60  # every create of both phases, checked
