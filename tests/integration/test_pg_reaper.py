"""A test run killed with kill -9 leaves no PostgreSQL server behind (tests/reaper.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.pgserver import find_binaries

ROOT = Path(__file__).resolve().parents[2]
_STARTS_AND_DIES = """
import os, signal
from tests.pgserver import start_postgres
server = start_postgres()
print(server.root, server.port, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def _running(root: str) -> bool:
    """Whether a process whose command line names ``root`` (the server's) still runs.

    Not a probe of the port: another run's server may have taken it since.
    """
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if root.encode() in cmdline.read_bytes():
                return True
        except OSError:  # the process ended meanwhile
            continue
    return False


def test_a_killed_run_leaves_no_postgres_behind() -> None:
    if find_binaries() is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but the PostgreSQL binaries are missing")
        pytest.skip("PostgreSQL binaries not installed")
    run = subprocess.run(
        [sys.executable, "-c", _STARTS_AND_DIES], cwd=ROOT, capture_output=True, text=True,
        timeout=180, check=False,
    )  # fmt: skip
    assert run.returncode == -9, run.stderr
    root, _port = run.stdout.split()
    assert _running(root) or not Path(root).exists()  # the probe sees a server it names
    # The reaper needs a moment to stop the server: wait for it, boundedly.
    for _ in range(600):
        if not Path(root).exists() and not _running(root):
            break
        time.sleep(0.1)
    assert not Path(root).exists(), "the server's folder outlived the run"
    assert not _running(root), "the server outlived the run"
