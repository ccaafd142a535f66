"""The commands a newcomer runs: keys create, migrate, serve (as make run does)."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

SLOTWARD = [sys.executable, "-m", "slotward.api.cli.main"]


def _run(db: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SLOTWARD, "--db", f"sqlite+aiosqlite:///{db}", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _call(url: str, body: Any, key: str) -> tuple[int, dict[str, str], bytes]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Authorization": f"Bearer {key}"}
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as err:
        return err.code, dict(err.headers), err.read()


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    db = tmp_path / "cli.db"
    port = _free_port()
    proc = subprocess.Popen(
        [
            *SLOTWARD,
            "--db",
            f"sqlite+aiosqlite:///{db}",
            "serve",
            "--port",
            str(port),
            "--demo-key",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env={**os.environ, "SLOTWARD_SWEEP_INTERVAL": "0.5"},
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:  # wait until it listens (readiness, not a timing assertion)
            try:
                urllib.request.urlopen(f"{base}/healthz", timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"server did not start: {proc.stdout}") from None
                time.sleep(0.1)
        yield base, db
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0  # SIGTERM is a clean shutdown
        if proc.stdout:
            proc.stdout.close()


def test_keys_create_prints_the_key_last_and_migrate_is_idempotent(tmp_path: Path) -> None:
    db = tmp_path / "keys.db"
    made = _run(db, "keys", "create", "--tenant", "acme", "--agent", "bot", "--role", "admin")
    assert made.returncode == 0, made.stderr
    key = made.stdout.strip().splitlines()[-1]
    assert key.startswith("sw_")
    assert key not in db.read_bytes().decode("latin-1")  # stored hashed, never in clear
    for _ in range(2):
        migrated = _run(db, "migrate")
        assert migrated.returncode == 0, migrated.stderr


def test_bad_role_is_a_clear_error(tmp_path: Path) -> None:
    made = _run(tmp_path / "x.db", "keys", "create", "--tenant", "a", "--agent", "b", "--role", "x")
    assert made.returncode == 2
    assert "invalid choice" in made.stderr


def test_served_process_places_and_replays_a_hold(served: tuple[str, Path]) -> None:
    base, db = served
    made = _run(db, "keys", "create", "--tenant", "acme", "--agent", "bot")
    key = made.stdout.strip().splitlines()[-1]
    body = {
        "workflow_id": "wf-cli",
        "attendees": ["alex@example.com"],
        "start": "2099-10-14T14:00:00Z",
        "duration_minutes": 30,
    }
    status, headers, first = _call(f"{base}/v1/holds", body, key)
    assert status == 201
    assert headers["Idempotent-Replayed"] == "false"
    status, headers, again = _call(f"{base}/v1/holds", body, key)
    assert status == 201
    assert headers["Idempotent-Replayed"] == "true"
    assert again == first
    with urllib.request.urlopen(f"{base}/openapi.json", timeout=10) as resp:
        assert json.load(resp)["openapi"] == "3.1.0"


def test_make_run_prints_the_url_and_a_working_key_then_a_busy_port_fails_cleanly(
    tmp_path: Path,
) -> None:
    db = tmp_path / "run.db"
    port = _free_port()
    argv = [*SLOTWARD, "--db", f"sqlite+aiosqlite:///{db}", "serve", "--port", str(port)]
    proc = subprocess.Popen([*argv, "--demo-key"], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        banner = proc.stdout.readline()
        assert banner.startswith(f"slotward serving http://127.0.0.1:{port}")
        key = proc.stdout.readline().strip().split()[-1]
        assert key.startswith("sw_")
        body = {"workflow_id": "wf", "attendees": ["a@example.com"],
                "start": "2099-01-01T10:00:00Z", "duration_minutes": 30}  # fmt: skip
        status, _, _ = _call(f"http://127.0.0.1:{port}/v1/holds", body, key)
        assert status == 201
        busy = subprocess.run([*argv, "--demo-key"], capture_output=True, text=True, timeout=60)
        assert busy.returncode == 2
        assert busy.stdout == ""  # nothing announced, no key minted for a server that is not up
        assert "address already in use" in busy.stderr.lower()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        if proc.stdout:
            proc.stdout.close()


def test_workers_do_not_outlive_a_killed_parent(tmp_path: Path) -> None:
    """After kill -9 of the parent, no worker may go on serving the port."""
    db = tmp_path / "workers.db"
    port = _free_port()
    argv = [*SLOTWARD, "--db", f"sqlite+aiosqlite:///{db}", "serve", "--port", str(port),
            "--workers", "2"]  # fmt: skip
    log = (tmp_path / "workers.log").open("w")
    scratch = tmp_path / "tmp"  # where the server makes its metrics directory
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch)}
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env)
    base = f"http://127.0.0.1:{port}/healthz"
    seen: set[int] = set()
    try:
        deadline = time.monotonic() + 60
        while len(seen) < 2 and time.monotonic() < deadline:  # readiness, bounded
            try:
                with urllib.request.urlopen(base, timeout=1) as resp:
                    seen.add(json.load(resp)["process"])
            except OSError:
                time.sleep(0.05)
        assert len(seen) == 2, "both workers should answer"
        assert len(list(scratch.glob("slotward-metrics-*"))) == 1
        proc.kill()
        proc.wait(timeout=30)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # the orphan notices within a second
            try:
                urllib.request.urlopen(base, timeout=1).close()
            except OSError:
                break
            time.sleep(0.1)
        else:
            raise AssertionError("a worker kept serving after its parent was killed")
        deadline = time.monotonic() + 30
        while list(scratch.glob("slotward-metrics-*")) and time.monotonic() < deadline:
            time.sleep(0.05)  # the orphans remove it as they exit
        assert list(scratch.glob("slotward-metrics-*")) == []
    finally:
        if proc.poll() is None:
            proc.kill()
        log.close()


def test_one_process_on_port_0_announces_the_port_it_got(tmp_path: Path) -> None:
    argv = [*SLOTWARD, "--db", f"sqlite+aiosqlite:///{tmp_path / 'one.db'}", "serve",
            "--port", "0"]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        banner = proc.stdout.readline()
        port = int(banner.split("http://127.0.0.1:")[1].split()[0])
        assert port != 0
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as resp:
            assert resp.status == 200
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        if proc.stdout:
            proc.stdout.close()


def test_workers_share_one_port_that_no_second_server_can_join(tmp_path: Path) -> None:
    """--workers: the parent owns the port; --port 0 gives one real port for all workers."""
    argv = [*SLOTWARD, "--db", f"sqlite+aiosqlite:///{tmp_path / 'one.db'}", "serve",
            "--port", "0", "--workers", "2", "--demo-key"]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert proc.stdout is not None
        banner = proc.stdout.readline()
        port = int(banner.split("http://127.0.0.1:")[1].split()[0])
        assert port != 0
        assert "2 processes" in banner
        key = proc.stdout.readline().strip().split()[-1]
        seen: set[int] = set()
        deadline = time.monotonic() + 60
        while len(seen) < 2 and time.monotonic() < deadline:  # readiness, bounded
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as resp:
                seen.add(json.load(resp)["process"])
        assert len(seen) == 2, "both workers serve the one port"

        second = [*SLOTWARD, "--db", f"sqlite+aiosqlite:///{tmp_path / 'two.db'}", "serve",
                  "--port", str(port), "--workers", "2"]  # fmt: skip
        busy = subprocess.run(second, capture_output=True, text=True, timeout=60)
        assert busy.returncode == 2
        assert busy.stdout == ""
        assert "address already in use" in busy.stderr.lower()
        for _ in range(12):  # every answer still comes from the first server
            status, _, _ = _call(f"http://127.0.0.1:{port}/v1/holds", {}, key)
            assert status == 422  # authenticated by the first server's key, then refused
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        if proc.stdout:
            proc.stdout.close()


def _children(pid: int) -> set[int]:
    found: set[int] = set()
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            found |= {int(p) for p in (task / "children").read_text().split()}
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat")
    with contextlib.suppress(OSError):
        if stat.read_text().rsplit(")", 1)[1].split()[0] == "Z":
            return False  # a zombie: exited, not yet reaped by its new parent
    return True


def test_workers_stop_when_the_parent_dies_while_they_start(tmp_path: Path) -> None:
    """kill -9 of the parent before its workers have even imported: none may live on.

    Whatever the workers could not clean up, the next `serve --workers` does.
    """
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch)}
    argv = [*SLOTWARD, "--db", f"sqlite+aiosqlite:///{tmp_path / 'w.db'}", "serve",
            "--port", "0", "--workers", "2"]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    workers: set[int] = set()
    deadline = time.monotonic() + 60
    while len(workers) < 2 and time.monotonic() < deadline:  # the spawned workers appear
        workers |= _children(proc.pid) - {proc.pid}
        time.sleep(0.005)
    proc.kill()
    proc.wait(timeout=30)
    assert workers, "the workers were never seen"
    deadline = time.monotonic() + 60
    while any(_alive(w) for w in workers) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(_alive(w) for w in workers), "a worker outlived its parent"

    (scratch / f"slotward-metrics-{proc.pid}-leftover").mkdir(exist_ok=True)  # as if left
    again = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
                             text=True)  # fmt: skip
    try:
        assert again.stdout is not None
        assert again.stdout.readline().startswith("slotward serving")
        left = [d.name for d in scratch.glob("slotward-metrics-*")]
        assert left == [d for d in left if d.startswith(f"slotward-metrics-{again.pid}-")]
        assert len(left) == 1  # only the running server's own
    finally:
        again.terminate()
        again.wait(timeout=60)
        if again.stdout:
            again.stdout.close()
    assert list(scratch.glob("slotward-metrics-*")) == []
