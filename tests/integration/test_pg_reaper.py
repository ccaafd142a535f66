"""A test run killed with kill -9 leaves no server behind (tests/reaper.py): neither a
run in one process nor a parallel one (pytest-xdist, as `make test` runs)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
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


# A test of a parallel run (pytest-xdist, as `make test` runs): it writes the roots of
# its worker's PostgreSQL and Radicale, then waits until the test below lets it end.
_HOLDS_ITS_SERVERS = """
import os
import time
from pathlib import Path


def test_holds_its_servers(postgres, radicale):
    probe = Path(os.environ["SLOTWARD_REAPER_PROBE"])
    (probe / "roots").write_text(f"{postgres.root} {radicale.root}")
    for _ in range(1200):  # bounded: until the outer test lets it end
        if (probe / "go").exists():
            return
        time.sleep(0.1)
"""


def _until(predicate: Callable[[], bool], what: str) -> None:
    """Wait (bounded, 60 s) until ``predicate`` holds."""
    for _ in range(600):
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(what)


def test_a_killed_parallel_run_leaves_no_server_behind(tmp_path: Path) -> None:
    """kill -9 of a parallel run's controller: its worker ends with the test it is
    running (its report has nowhere to go), and the worker's reapers stop the
    PostgreSQL and the Radicale it started."""
    if find_binaries() is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but the PostgreSQL binaries are missing")
        pytest.skip("PostgreSQL binaries not installed")
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_holds.py").write_text(_HOLDS_ITS_SERVERS)
    argv = [sys.executable, "-m", "pytest", "-q", "-n", "1", "-c", os.devnull,
            "--rootdir", str(suite), "-p", "no:cacheprovider", "-p", "tests.conftest",
            "-p", "tests.integration.radicale_fixtures", str(suite)]  # fmt: skip
    env = {**os.environ, "SLOTWARD_REAPER_PROBE": str(tmp_path)}
    run = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        _until(lambda: (tmp_path / "roots").exists() or run.poll() is not None, "no servers")
        assert run.poll() is None, "the run ended before its test held its servers"
        roots = (tmp_path / "roots").read_text().split()
        assert all(_running(root) for root in roots)  # the probe sees the servers it names
        run.kill()
        run.wait(timeout=30)
        (tmp_path / "go").touch()  # the worker's test ends; its report has nowhere to go
        _until(lambda: not any(_running(r) or Path(r).exists() for r in roots), "left behind")
    finally:
        if run.poll() is None:
            run.kill()
            run.wait(timeout=30)
        (tmp_path / "go").touch()
