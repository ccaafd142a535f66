"""A throwaway PostgreSQL server for the test suite.

Started from the installed binaries (initdb, pg_ctl) in a temporary folder, on
a loopback port, as a non-root user: PostgreSQL refuses to run as root, so
when the suite runs as root (CI does) the server runs as ``postgres`` through
``runuser``. Durability settings are off: the data dies with the run, and
the server with it: a reaper process (tests/reaper.py) stops it when the run
ends without stopping it (killed by a signal, a timeout or kill -9).
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["PgServer", "find_binaries", "start_postgres"]

USER = "postgres"


def find_binaries() -> Path | None:
    """The folder holding initdb and pg_ctl, or None when PostgreSQL is absent."""
    found = shutil.which("initdb")
    if found and shutil.which("pg_ctl"):
        return Path(found).resolve().parent
    for folder in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if Path(folder, "initdb").exists():
            return Path(folder)
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class PgServer:
    bin_dir: Path
    root: Path
    port: int
    as_user: list[str]
    # The write end of the reaper's pipe: held open for as long as this process lives.
    _reaper: int | None = field(default=None, repr=False)
    _reaper_process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def data(self) -> Path:
        return self.root / "data"

    def url(self, database: str) -> str:
        return f"postgresql+asyncpg://{USER}@127.0.0.1:{self.port}/{database}"

    def run(self, *argv: str) -> str:
        done = subprocess.run(
            [*self.as_user, *argv], capture_output=True, text=True, timeout=120, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(f"{argv[0]} failed: {done.stdout}\n{done.stderr}")
        return done.stdout

    def psql(self, sql: str, database: str = "postgres") -> str:
        return self.run(
            str(self.bin_dir / "psql"), "-h", "127.0.0.1", "-p", str(self.port), "-U", USER,
            "-d", database, "-v", "ON_ERROR_STOP=1", "-At", "-c", sql,
        )  # fmt: skip

    def create_database(self, name: str, template: str | None = None) -> str:
        copy = f' TEMPLATE "{template}"' if template else ""
        self.psql(f'CREATE DATABASE "{name}"{copy}')
        return self.url(name)

    def stop_command(self) -> list[str]:
        return [*self.as_user, str(self.bin_dir / "pg_ctl"), "-D", str(self.data),
                "-m", "immediate", "-w", "stop"]  # fmt: skip

    def stop(self) -> None:
        subprocess.run(self.stop_command(), capture_output=True, timeout=120, check=False)
        shutil.rmtree(self.root, ignore_errors=True)
        if self._reaper is not None:
            os.close(self._reaper)  # the reaper wakes, finds nothing left to stop, and exits
            self._reaper = None
        if self._reaper_process is not None:
            self._reaper_process.wait(timeout=130)
            self._reaper_process = None

    def watch(self) -> None:
        """Start the reaper that stops this server if the test run dies first."""
        read, write = os.pipe()  # not inherited by the programs the tests start
        self._reaper_process = subprocess.Popen(
            [sys.executable, "-m", "tests.reaper", str(self.root), *self.stop_command()],
            stdin=read, start_new_session=True, cwd=Path(__file__).resolve().parent.parent,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        os.close(read)
        self._reaper = write


def start_postgres() -> PgServer:
    """initdb + pg_ctl start on a free loopback port; the caller must ``stop()``."""
    bin_dir = find_binaries()
    if bin_dir is None:
        raise FileNotFoundError("PostgreSQL binaries (initdb, pg_ctl) not found")
    root = Path(tempfile.mkdtemp(prefix="slotward-pg-"))
    root.chmod(0o755)
    as_user: list[str] = []
    if os.geteuid() == 0:
        shutil.chown(root, USER)
        as_user = ["runuser", "-u", USER, "--"]
    server = PgServer(bin_dir, root, _free_port(), as_user)
    server.watch()
    try:
        _init_and_start(server, bin_dir)
    except BaseException:
        server.stop()  # no half-started server or folder left behind
        raise
    return server


def _init_and_start(server: PgServer, bin_dir: Path) -> None:
    root = server.root
    server.run(
        str(bin_dir / "initdb"), "-D", str(server.data), "-U", USER, "-A", "trust",
        "--no-sync", "-E", "UTF8", "--locale=C",
    )  # fmt: skip
    options = (
        f"-p {server.port} -c listen_addresses=127.0.0.1 -k {root} "
        "-c fsync=off -c synchronous_commit=off -c full_page_writes=off "
        "-c max_connections=300 -c shared_buffers=128MB"
    )
    server.run(
        str(bin_dir / "pg_ctl"), "-D", str(server.data), "-o", options,
        "-l", str(root / "server.log"), "-w", "-t", "60", "start",
    )  # fmt: skip
