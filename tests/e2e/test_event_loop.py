"""`slotward serve` on either event loop: a create, its replay, and a clean stop."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.served import slotward_serve
from tests.e2e.test_cli import _call

BODY = {"workflow_id": "wf-loop", "attendees": ["alex@example.com"],
        "start": "2030-10-14T14:00:00Z", "duration_minutes": 30, "title": "Loop"}  # fmt: skip


@pytest.mark.parametrize("loop", ["uvloop", "asyncio"])
def test_serve_creates_and_replays_on_either_loop(tmp_path: Path, loop: str) -> None:
    env = {"SLOTWARD_EVENT_LOOP": loop, "SLOTWARD_LOG_FORMAT": "json"}
    with slotward_serve(tmp_path, env, demo_key=True) as served:
        assert served.secret is not None
        first = _call(f"{served.base}/v1/holds", BODY, served.secret)
        again = _call(f"{served.base}/v1/holds", BODY, served.secret)
    assert (first[0], again[0]) == (201, 201)
    assert again[2] == first[2]  # the stored answer, byte for byte
    assert again[1]["Idempotent-Replayed"] == "true"
    assert '"outcome":"replayed"' in served.log()  # the access line of the replay
