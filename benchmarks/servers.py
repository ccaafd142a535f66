"""Fresh databases and the servers a benchmark drives, started and always stopped.

SQLite (``--db sqlite``, the default, or any ``sqlite`` URL): every scenario
gets a new file in the run's temporary directory, never the user's database.
PostgreSQL (``--db postgresql://USER@HOST:PORT/DB``): the URL names a server
and a database to connect to for administration; every scenario gets a
throwaway database created there (``CREATE DATABASE``, so the role needs
``CREATEDB``) and dropped at the end of the run.

Servers are subprocesses on a free loopback port: ``slotward serve`` with the
rate limit off (``SLOTWARD_RATE_LIMIT=0``: it would cap what is measured), and
the echo and reference servers. Their output goes to a log file in the run's
directory, shown when a server fails to start.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Sequence
from functools import partial
from pathlib import Path

from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.pool import NullPool

from slotward.api.bootstrap import open_store
from slotward.api.config import Config
from slotward.api.keyhash import KeyHasher
from slotward.api.keys import create_key
from slotward.benchmarks.results import db_kind
from slotward.engine.clock import SystemClock, TimeOrderedIds
from slotward.engine.model import Principal

__all__ = [
    "Databases",
    "Restartable",
    "ServerFailed",
    "echo_server",
    "free_port",
    "make_keys",
    "reference_server",
    "server_env",
    "server_pid",
    "slotward_server",
    "workspace",
]

_START_SECONDS = 120
_STOP_SECONDS = 60
_runs = itertools.count()
_pids: dict[str, int] = {}  # base URL -> pid of the server running there


class ServerFailed(RuntimeError):
    """A server did not start (its log's tail is in the message)."""


class Databases:
    """Fresh databases for one run, all removed by :meth:`close`."""

    def __init__(self, db: str, workdir: Path) -> None:
        self.kind = db_kind(db)
        self.workdir = workdir
        self._made: list[str] = []
        self._admin = ""
        if self.kind == "postgresql":
            url = make_url(db).set(drivername="postgresql+asyncpg")
            self._admin = url.set(database=url.database or "postgres").render_as_string(False)
        self._prefix = f"slotward_bench_{os.getpid()}_{next(_runs)}"

    def fresh(self, label: str) -> str:
        """The URL of a new, empty database for the scenario ``label``."""
        name = f"{self._prefix}_{len(self._made)}_{re.sub(r'[^a-z0-9_]', '_', label.lower())}"
        self._made.append(name)
        if self.kind == "sqlite":
            return f"sqlite+aiosqlite:///{self.workdir / name}.db"
        asyncio.run(self._admin_sql(f'CREATE DATABASE "{name}"'))
        return make_url(self._admin).set(database=name).render_as_string(False)

    def close(self) -> None:
        """Drop every database made (PostgreSQL); SQLite files go with the directory."""
        if self.kind == "postgresql":
            for name in self._made:
                asyncio.run(self._admin_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        self._made.clear()

    async def _admin_sql(self, sql: str) -> None:
        engine = create_async_engine(self._admin, poolclass=NullPool, isolation_level="AUTOCOMMIT")
        try:
            async with engine.connect() as conn:
                await conn.execute(text(sql))
        finally:
            await engine.dispose()


@contextlib.contextmanager
def server_env(wanted: dict[str, str]) -> Iterator[None]:
    """``wanted`` in the environment the servers started meanwhile inherit; the
    variables as they were afterwards."""
    saved = {k: os.environ.get(k) for k in wanted}
    os.environ.update(wanted)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def workspace(db: str) -> Iterator[Databases]:
    """A run's databases and its temporary directory (logs, SQLite files), removed after."""
    workdir = Path(tempfile.mkdtemp(prefix="slotward-bench-"))
    try:
        databases = Databases(db, workdir)
        try:
            yield databases
        finally:
            databases.close()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def make_keys(url: str, principals: Sequence[Principal]) -> list[str]:
    """Migrate the database at ``url`` and store a key for each principal; their secrets."""
    return asyncio.run(_make_keys(url, principals))


async def _make_keys(url: str, principals: Sequence[Principal]) -> list[str]:
    store = await open_store(Config(db_url=url))
    clock, ids, hasher = SystemClock(), TimeOrderedIds(), KeyHasher()
    try:
        secrets: list[str] = []
        for start in range(0, len(principals), 16):  # a few at once: PostgreSQL overlaps them
            batch = principals[start : start + 16]
            made = await asyncio.gather(
                *(store.write(partial(create_key, principal=p, clock=clock, ids=ids,
                                      hasher=hasher)) for p in batch)
            )  # fmt: skip
            secrets += [m.secret for m in made]
        return secrets
    finally:
        await store.close()


def server_pid(base: str) -> int | None:
    """The pid of the server started here that answers at ``base`` (its workers are its
    children), or None for a server this process did not start."""
    return _pids.get(base.rstrip("/"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def slotward_server(
    url: str, workers: int, logs: Path, cwd: Path | None = None
) -> contextlib.AbstractContextManager[str]:
    """``slotward serve`` on ``url`` with ``workers`` processes; yields its base URL.

    ``cwd``: the directory it runs in, this one's by default (``python -m``
    imports from there first: benchmarks/pair.py runs each tree's from its own).
    """
    argv = ["slotward.api.cli.main", "--db", url, "serve", "--workers", str(workers), "--port"]
    return _running("slotward", argv, logs, cwd)


def echo_server(workers: int, logs: Path) -> contextlib.AbstractContextManager[str]:
    """The bare aiohttp JSON echo (``benchmarks/echo.py``); yields its base URL."""
    argv = ["slotward.benchmarks.echo", "--workers", str(workers), "--port"]
    return _running("echo", argv, logs)


def reference_server(url: str, workers: int, logs: Path) -> contextlib.AbstractContextManager[str]:
    """The minimal reference server (``benchmarks/reference.py``) on ``url``."""
    argv = ["slotward.benchmarks.reference", "--db", url, "--workers", str(workers), "--port"]
    return _running("reference", argv, logs)


@contextlib.contextmanager
def _running(name: str, argv: list[str], logs: Path, cwd: Path | None = None) -> Iterator[str]:
    """Start ``python -m <argv> <port>``; yield once it answers /healthz; always stop it."""
    port = free_port()
    log_path = logs / f"{name}-{port}.log"
    env = {**os.environ, "SLOTWARD_RATE_LIMIT": "0"}
    with log_path.open("wb") as log:  # a file, never a pipe nobody drains
        proc = subprocess.Popen(
            [sys.executable, "-m", *argv, str(port)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=cwd,
        )
        try:
            base = f"http://127.0.0.1:{port}"
            _wait_ready(name, base, proc, log_path)
            _pids[base] = proc.pid
            yield base
        finally:
            _pids.pop(base, None)
            proc.terminate()
            try:
                proc.wait(timeout=_STOP_SECONDS)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


class Restartable:
    """``slotward serve`` on one port, SIGKILLed and started again at will (bench chaos).

    The server runs in a session of its own, so a kill takes its ``--workers``
    with it at once (``killpg``): no orphan keeps the port from the next start.
    Each start logs to a file of its own in ``logs``, read for the readiness line.
    A server that exited on its own (found dead by a kill or the stop), or that did
    not stop cleanly (a non-zero exit on SIGTERM), is a crash: ``crashes`` says each.
    """

    def __init__(self, url: str, workers: int, logs: Path) -> None:
        self.url, self.workers, self.logs = url, workers, logs
        self.port = free_port()
        self.starts = 0
        self.kills = 0
        self.crashes: list[str] = []
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        """Start it and return once it serves (ServerFailed if it does not)."""
        argv = [sys.executable, "-m", "slotward.api.cli.main", "--db", self.url, "serve",
                "--workers", str(self.workers), "--port", str(self.port)]  # fmt: skip
        log_path = self.logs / f"chaos-{self.port}-{self.starts}.log"
        env = {**os.environ, "SLOTWARD_RATE_LIMIT": "0"}
        with log_path.open("wb") as log:
            self._proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env,
                                          start_new_session=True)  # fmt: skip
        self.starts += 1
        _wait_ready("slotward", self.base, self._proc, log_path)
        _pids[self.base] = self._proc.pid

    def kill(self) -> None:
        """SIGKILL the server and its workers, and reap it; a crash if it was already dead."""
        if self._proc is None:
            return
        if self._proc.poll() is not None:  # it died on its own: never hidden by a restart
            self._crashed(f"exited with {self._proc.returncode} on its own")
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._proc.pid, signal.SIGKILL)  # any worker it left behind
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._proc.pid, signal.SIGKILL)
        self._proc.wait()
        self.kills += 1

    def stop(self) -> int | None:
        """SIGTERM (a clean shutdown), SIGKILL what outlives the grace; the exit code.

        Anything but 0 is a crash: found dead, a non-zero exit, or no exit in time.
        """
        proc, self._proc = self._proc, None
        _pids.pop(self.base, None)
        if proc is None:
            return None
        if proc.poll() is not None:
            self._crashed(f"exited with {proc.returncode} on its own")
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            return proc.returncode
        proc.terminate()
        try:
            code = proc.wait(timeout=_STOP_SECONDS)
        except subprocess.TimeoutExpired:
            code = None
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)  # whatever is left of the group
        proc.wait()
        if code != 0:
            said = "did not stop in time" if code is None else f"stopped with {code}"
            self._crashed(f"{said} on SIGTERM")
        return code

    def _crashed(self, what: str) -> None:
        self.crashes.append(f"(start {self.starts}, port {self.port}) {what}; its log is in "
                            f"{self.logs}")  # fmt: skip


def _wait_ready(name: str, base: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    """Until the server says it serves (once every worker does) and ``/healthz`` answers."""
    deadline = time.monotonic() + _START_SECONDS
    while True:
        if proc.poll() is not None or time.monotonic() > deadline:
            tail = log.read_text(errors="replace")[-3000:]
            raise ServerFailed(f"the {name} server did not start; its output:\n{tail}")
        if f"{name} serving" in log.read_text(errors="replace"):
            try:
                urllib.request.urlopen(f"{base}/healthz", timeout=2).close()
                return
            except OSError:
                pass
        time.sleep(0.05)
