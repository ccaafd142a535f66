"""The server CPU a benchmark reads: a process tree's own user + system time."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from slotward.benchmarks.cpu import cpu_seconds, per_call_us, tree_cpu_seconds

BURN = "import time\nend = time.process_time() + 0.3\nwhile time.process_time() < end: pass\n"


def _wait_for(path: str) -> None:
    deadline = time.monotonic() + 30
    while not os.path.exists(path):
        assert time.monotonic() < deadline, "the child did not finish its work"
        time.sleep(0.02)


def _stop(parent: subprocess.Popen[bytes]) -> None:
    """The parent and whatever it started (its own session)."""
    os.killpg(parent.pid, signal.SIGKILL)
    parent.wait()


def test_the_tree_counts_a_child_that_worked_and_exited(tmp_path: object) -> None:
    done = f"{tmp_path}/done"
    # A parent that idles while its child burns 0.3 s of CPU, waits for it, then idles:
    # like `serve --workers N`, whose workers are its children.
    script = (f"import subprocess, sys, time\n"
              f"subprocess.run([sys.executable, '-c', {BURN!r}], check=True)\n"
              f"open({done!r}, 'w').close()\ntime.sleep(30)\n")  # fmt: skip
    parent = subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
    try:
        _wait_for(done)
        assert tree_cpu_seconds(parent.pid) >= 0.3  # the reaped child's time is in the tree
        assert cpu_seconds(parent.pid) < 0.3  # the parent's own did not include it
    finally:
        _stop(parent)


def test_a_live_child_counts_too() -> None:
    child = BURN + "time.sleep(30)\n"  # busy, then alive and idle
    script = f"import subprocess, sys\nsubprocess.run([sys.executable, '-c', {child!r}])\n"
    parent = subprocess.Popen([sys.executable, "-c", script], start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while tree_cpu_seconds(parent.pid) < 0.3:
            assert time.monotonic() < deadline, "the child's CPU was never counted"
            time.sleep(0.05)
    finally:
        _stop(parent)


def test_a_gone_process_counts_nothing_and_per_call_needs_calls() -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    assert tree_cpu_seconds(gone.pid) == cpu_seconds(gone.pid) == 0.0
    assert per_call_us(0.25, 100) == 2500.0
    assert per_call_us(None, 100) is None
    assert per_call_us(0.25, 0) is None
