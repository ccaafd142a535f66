"""docs/providers-kit.md stays true: its example adapter, with its example harness,
passes the conformance kit (run by pytest in a folder of its own, as its author would)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "providers-kit.md"


def test_the_documented_adapter_passes_the_kit(tmp_path: Path) -> None:
    adapter, tests = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.DOTALL)
    (tmp_path / "dircal.py").write_text(adapter)
    (tmp_path / "test_dircal.py").write_text(tests)
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir",
         str(tmp_path), "-o", "asyncio_mode=auto", "-o",
         "asyncio_default_fixture_loop_scope=function", "-W", "error", "test_dircal.py"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout + run.stderr
    assert "10 passed, 1 skipped" in run.stdout  # the incremental test: it reads in full
