"""Stops a throwaway server once the test run that started it is gone, kill -9 included.

Run as ``python -m tests.reaper ROOT COMMAND...`` with its standard input the
read end of a pipe whose only writer is the test run: when that process ends,
however it ends, the kernel closes the pipe, the read below returns, and the
reaper runs COMMAND (the server's stop) and removes ROOT. It lives in a session
of its own, so a signal to the run's process group does not take it along.
"""

from __future__ import annotations

import shutil
import subprocess
import sys


def main(argv: list[str]) -> None:
    root, command = argv[0], argv[1:]
    sys.stdin.buffer.read()  # blocks until the test run's end of the pipe is closed
    subprocess.run(command, capture_output=True, timeout=120, check=False)
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main(sys.argv[1:])
