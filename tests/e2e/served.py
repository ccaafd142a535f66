"""A real `slotward serve` process on a fresh SQLite file, its stderr kept whole in a file."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from tests.e2e.test_cli import SLOTWARD, _free_port


@dataclass
class Served:
    base: str
    port: int
    secret: str | None  # the demo key, when asked for
    stderr: Path  # complete once the block has ended: the process has exited

    def log(self) -> str:
        return self.stderr.read_text()


@contextlib.contextmanager
def slotward_serve(
    tmp_path: Path,
    env: Mapping[str, str],
    *,
    demo_key: bool = False,
    preexec_fn: Callable[[], None] | None = None,
) -> Iterator[Served]:
    """Serve until the block ends; then stop it and require a clean exit."""
    db, port = tmp_path / "served.db", _free_port()
    argv = [*SLOTWARD, "--db", f"sqlite+aiosqlite:///{db}", "serve", "--port", str(port)]
    stderr = tmp_path / "stderr.log"
    with stderr.open("w") as errors:  # a file, never a pipe nobody drains
        proc = subprocess.Popen(
            [*argv, *(["--demo-key"] if demo_key else [])], stdout=subprocess.PIPE,
            stderr=errors, text=True, preexec_fn=preexec_fn, env={**os.environ, **env},
        )  # fmt: skip
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline().startswith("slotward serving")
            secret = proc.stdout.readline().strip().split()[-1] if demo_key else None
            yield Served(f"http://127.0.0.1:{port}", port, secret, stderr)
        finally:
            proc.terminate()
            assert proc.wait(timeout=30) == 0
            if proc.stdout:
                proc.stdout.close()
