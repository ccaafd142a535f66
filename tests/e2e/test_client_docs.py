"""docs/client.md stays true: its example runs, as a user would run it, against a real server."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.e2e.served import slotward_serve

DOC = Path(__file__).resolve().parents[2] / "docs" / "client.md"
HEADING = "## A booking, from first try to commit"


def example(text: str) -> str:
    """The first Python block after the example's heading."""
    after = text[text.index(HEADING) :]
    found = re.search(r"^```python\n(.*?)^```$", after, re.M | re.S)
    assert found, f"no python block under {HEADING!r}"
    return found.group(1)


def test_the_example_books_and_commits(tmp_path: Path) -> None:
    code = example(DOC.read_text())
    with slotward_serve(tmp_path, {}, demo_key=True) as served:
        assert served.secret is not None
        env = {**os.environ, "SLOTWARD_URL": served.base, "SLOTWARD_KEY": served.secret}
        run = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60,
            check=False,
        )  # fmt: skip
    assert run.returncode == 0, run.stderr
    hold_id, status, start, end = run.stdout.split()
    assert hold_id.startswith("hold_")
    assert (status, start, end) == ("committed", "2030-10-14T09:00:00Z", "2030-10-14T09:30:00Z")
    assert served.secret not in run.stdout + run.stderr
