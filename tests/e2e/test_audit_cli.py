"""`slotward audit seal|checkpoint|verify`, as real processes on a real file.

The chains are written by a real `slotward serve` (with and without
``SLOTWARD_AUDIT_KEY``, as an upgrade goes), then tampered with straight in
the SQLite file, as a writer of the database would.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from slotward.engine.rules.audit import AuditKey
from slotward.engine.rules.checkpoints import Checkpoint, sign_checkpoint
from tests.e2e.test_cli import SLOTWARD, _call, _free_port

AUDIT_KEY = "cli audit key, long enough to pass"


def _env(key: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "SLOTWARD_AUDIT_KEY"}
    return env if key is None else {**env, "SLOTWARD_AUDIT_KEY": key}


def _run(db: Path, *args: str, key: str | None = AUDIT_KEY) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SLOTWARD, "--db", f"sqlite+aiosqlite:///{db}", *args],
        capture_output=True, text=True, timeout=60, check=False, env=_env(key),
    )  # fmt: skip


@contextlib.contextmanager
def _serving(db: Path, key: str | None) -> Iterator[tuple[str, str]]:
    """A `slotward serve --demo-key` process; yields its base URL and the demo key."""
    port = _free_port()
    argv = [*SLOTWARD, "--db", f"sqlite+aiosqlite:///{db}", "serve", "--port", str(port)]
    proc = subprocess.Popen([*argv, "--demo-key"], stdout=subprocess.PIPE, text=True,
                            env=_env(key))  # fmt: skip
    try:
        assert proc.stdout is not None
        proc.stdout.readline()  # the banner: it is listening
        secret = proc.stdout.readline().strip().split()[-1]
        yield f"http://127.0.0.1:{port}", secret
    finally:
        proc.terminate()
        assert proc.wait(timeout=30) == 0
        if proc.stdout:
            proc.stdout.close()


def _holds(base: str, secret: str, n: int, day: int = 1) -> None:
    for i in range(day - 1, day - 1 + n):
        body = {"workflow_id": f"wf-{i}-{time.monotonic_ns()}", "attendees": ["a@example.com"],
                "start": f"2099-01-{i + 1:02d}T10:00:00Z", "duration_minutes": 30}  # fmt: skip
        status, _, answer = _call(f"{base}/v1/holds", body, secret)
        assert status == 201, answer


def _verify_base(base: str, secret: str) -> Any:
    request = urllib.request.Request(
        f"{base}/v1/audit/verify", headers={"Authorization": f"Bearer {secret}"}
    )
    with urllib.request.urlopen(request, timeout=10) as resp:
        return json.load(resp)


def _lines(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines()]


def _no_secret(*outputs: subprocess.CompletedProcess[str]) -> None:
    for done in outputs:
        assert AUDIT_KEY not in done.stdout + done.stderr


def test_a_checkpoint_catches_the_tail_deleted_behind_it(tmp_path: Path) -> None:
    db = tmp_path / "audit.db"
    with _serving(db, AUDIT_KEY) as (base, secret):
        _holds(base, secret, 4)
        assert _verify_base(base, secret)["keyed"] is True  # `serve` holds the key
    point = _run(db, "audit", "checkpoint")
    assert point.returncode == 0, point.stderr
    tokens = point.stdout.split()
    assert len(tokens) == 1  # one tenant, "demo"
    assert tokens[0].startswith("swcp1.")
    heads = tmp_path / "heads.txt"
    heads.write_text(point.stdout)
    good = _run(db, "audit", "verify", "--checkpoint", str(heads))
    assert good.returncode == 0, good.stderr
    assert _lines(good.stdout) == [
        {"tenant": "demo", "ok": True, "count": 4, "head": _lines(good.stdout)[0]["head"],
         "keyed": True, "keyed_from": 1, "checkpoint": "ok"},
    ]  # fmt: skip

    with sqlite3.connect(db) as conn:  # the attacker: drop the last entry, move the head back
        conn.execute("DELETE FROM audit_log WHERE tenant = 'demo' AND seq = 4")
        conn.execute("UPDATE audit_heads SET seq = 3, hash = (SELECT hash FROM audit_log "
                     "WHERE tenant = 'demo' AND seq = 3) WHERE tenant = 'demo'")  # fmt: skip
    alone = _run(db, "audit", "verify")
    assert alone.returncode == 0  # a chain of three is whole: no checkpoint, no proof
    caught = _run(db, "audit", "verify", "--checkpoint", str(heads))
    assert caught.returncode == 1
    [doc] = _lines(caught.stdout)
    assert (doc["ok"], doc["checkpoint"], doc["reason"], doc["broken_at"]) == (
        False, "failed", "checkpoint", 4,
    )  # fmt: skip
    _no_secret(point, good, alone, caught)


def test_a_chain_written_before_the_key_is_keyed_only_by_an_explicit_seal(
    tmp_path: Path,
) -> None:
    db = tmp_path / "legacy.db"
    with _serving(db, None) as (base, secret):
        _holds(base, secret, 2)
    plain = _run(db, "audit", "verify", key=None)
    assert (plain.returncode, _lines(plain.stdout)[0]["ok"]) == (0, True)
    unsealed = _run(db, "audit", "verify")
    assert unsealed.returncode == 1  # under a key, a plain chain vouches for nothing
    assert _lines(unsealed.stdout)[0]["reason"] == "unkeyed"
    with _serving(db, AUDIT_KEY) as (base, secret):  # a keyed server does not key it by itself
        _holds(base, secret, 1, day=5)
        assert _verify_base(base, secret)["reason"] == "unkeyed"
    refused = _run(db, "audit", "checkpoint", "--tenant", "demo")
    assert refused.returncode == 1  # a plain head is not signed
    assert "audit_chain_broken" in refused.stderr
    assert "slotward audit seal" in refused.stderr
    unnamed = _run(db, "audit", "seal")  # which chains to vouch for is never a default
    assert unnamed.returncode == 2
    assert "--tenant" in unnamed.stderr
    assert "was ever keyed has been rewritten" in refused.stderr
    seal = _run(db, "audit", "seal", "--all")
    assert seal.returncode == 0, seal.stderr
    assert _lines(seal.stdout) == [{"tenant": "demo", "sealed": True, "seq": 4}]
    again = _run(db, "audit", "seal", "--tenant", "demo")
    assert _lines(again.stdout) == [{"tenant": "demo", "sealed": False, "seq": None}]
    point = _run(db, "audit", "checkpoint", "--tenant", "demo")
    assert point.returncode == 0, point.stderr
    heads = tmp_path / "heads.txt"
    heads.write_text(point.stdout)
    sealed = _run(db, "audit", "verify", "--tenant", "demo", "--checkpoint", str(heads))
    assert sealed.returncode == 0, sealed.stdout
    [doc] = _lines(sealed.stdout)
    assert (doc["count"], doc["keyed_from"], doc["checkpoint"]) == (4, 4, "ok")
    with _serving(db, AUDIT_KEY) as (base, secret):  # and the keyed server carries on, keyed
        _holds(base, secret, 1, day=10)
        assert _verify_base(base, secret)["ok"] is True
    nokey = _run(db, "audit", "verify", key=None)
    assert nokey.returncode == 1
    assert _lines(nokey.stdout)[0]["reason"] == "no_key"
    _no_secret(unsealed, refused, seal, again, point, sealed, nokey)


def test_bad_checkpoints_and_a_missing_key_are_clear_errors(tmp_path: Path) -> None:
    db = tmp_path / "errors.db"
    with _serving(db, AUDIT_KEY) as (base, secret):
        _holds(base, secret, 1)
    unkeyed = _run(db, "audit", "checkpoint", key=None)
    assert unkeyed.returncode == 2
    assert "audit_key_not_set" in unkeyed.stderr
    no_seal = _run(db, "audit", "seal", "--all", key=None)
    assert (no_seal.returncode, "audit_key_not_set" in no_seal.stderr) == (2, True)
    good = _run(db, "audit", "checkpoint").stdout.strip()
    with sqlite3.connect(db) as conn:
        seq, digest = conn.execute("SELECT seq, hash FROM audit_heads").fetchone()
    forged = sign_checkpoint(Checkpoint("demo", seq, digest, "x"), AuditKey.derive(b"0" * 32))
    cases = [
        ("garbage\n", (), "invalid_checkpoint"),
        ("\n# nothing but a comment\n", (), "invalid_checkpoint"),
        (forged, (), "checkpoint_signature_invalid"),
        (good, ("--tenant", "globex"), "checkpoint_wrong_tenant"),
    ]
    for i, (text, extra, code) in enumerate(cases):
        path = tmp_path / f"bad{i}.txt"
        path.write_text(text)
        done = _run(db, "audit", "verify", "--checkpoint", str(path), *extra)
        assert done.returncode == 2, (code, done.stdout, done.stderr)
        assert f"slotward: {code}:" in done.stderr
        _no_secret(done)
    missing = _run(db, "audit", "verify", "--checkpoint", str(tmp_path / "none.txt"))
    assert (missing.returncode, "invalid_checkpoint" in missing.stderr) == (2, True)
    _no_secret(unkeyed, missing)
