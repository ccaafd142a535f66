"""API keys over their life: created once, shown once, revoked by id."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import re
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from slotward.api.auth import create_key, revoke_key
from slotward.api.keyhash import KeyHasher
from slotward.engine.model import Principal
from tests.e2e.conftest import HOLD_BODY, Client, Server
from tests.e2e.test_cli import _run

CACHE_SECONDS = 0.05


@pytest.fixture
def config_overrides() -> dict[str, Any]:
    return {"key_cache_seconds": CACHE_SECONDS}


async def test_a_revoked_key_is_refused_once_the_cache_forgets_it(server: Server) -> None:
    agent = await server.key()
    other = await server.key(agent="agent-b")
    assert (await agent.create(dict(HOLD_BODY))).status == 201
    key_id = server.sql("SELECT id FROM api_keys WHERE agent_id = 'agent-a'")[0][0]
    await server.services.store.write(lambda uow: revoke_key(uow, key_id, server.clock))
    await asyncio.sleep(CACHE_SECONDS * 4)  # past the key cache's lifetime (real time)
    refused = await agent.get("/v1/holds")
    assert refused.status == 401
    assert refused.json["code"] == "invalid_api_key"
    assert (await other.get("/v1/holds")).status == 200  # only that key
    revoked = server.sql("SELECT revoked_us IS NOT NULL FROM api_keys WHERE id = ?", key_id)
    assert revoked == [(True,)]


def test_the_cli_creates_revokes_and_refuses_an_unknown_id(tmp_path: Path) -> None:
    db = tmp_path / "keys.db"
    made = _run(db, "keys", "create", "--tenant", "acme", "--agent", "bot")
    assert made.returncode == 0, made.stderr
    found = re.search(r"created agent key (key_[0-9a-f]+) for tenant acme", made.stdout)
    assert found is not None, made.stdout
    key_id = found.group(1)
    assert re.search(rf"\bsw_{key_id}\.[A-Za-z0-9_-]{{43}}\b", made.stdout), made.stdout
    with contextlib.closing(sqlite3.connect(db)) as conn:
        stored = conn.execute("SELECT key_hash FROM api_keys").fetchone()[0]
    assert stored.startswith("scrypt$14$8$1$")  # the default cost, and no pepper set
    revoked = _run(db, "keys", "revoke", key_id)
    assert revoked.returncode == 0, revoked.stderr
    assert revoked.stdout.startswith(f"revoked {key_id}")
    again = _run(db, "keys", "revoke", key_id)
    assert again.returncode == 2
    assert "key_not_found" in again.stderr
    assert _run(db, "keys", "revoke", "key_nope").returncode == 2


PEPPER = "p3pper-for-tests"


async def _make(server: Server, hasher: KeyHasher, agent: str = "new") -> tuple[str, str]:
    """A key made with ``hasher``: its id and secret."""
    made = await server.services.store.write(
        lambda uow: create_key(
            uow, Principal("acme", agent, "agent", 50), server.clock, server.services.ids, hasher
        )
    )
    return made.id, made.secret


def _stored(server: Server, key_id: str) -> str:
    return str(server.sql("SELECT key_hash FROM api_keys WHERE id = ?", key_id)[0][0])


async def test_keys_are_stored_as_scrypt_salted_by_their_id(server: Server) -> None:
    key_id, secret = await _make(server, KeyHasher())  # the default cost, as `keys create`
    assert secret.startswith(f"sw_{key_id}.")
    stored = _stored(server, key_id)
    scheme, log_n, r, p, digest = stored.split("$")
    assert (scheme, log_n, r, p) == ("scrypt", "14", "8", "1")
    expected = hashlib.scrypt(
        secret.encode(), salt=key_id.encode(), n=2**14, r=8, p=1, maxmem=2**26, dklen=32
    )
    assert base64.urlsafe_b64decode(digest + "=") == expected
    assert secret.split(".")[1] not in stored
    assert (await Client(server.session, server.base, secret).get("/v1/holds")).status == 200


async def test_a_wrong_secret_for_a_real_key_id_is_refused(server: Server) -> None:
    key_id, secret = await _make(server, KeyHasher(log_n=6))
    body = secret.split(".")[1]
    forged = f"sw_{key_id}.{body[:-1]}{'A' if body[-1] != 'A' else 'B'}"
    for attempt in (forged, f"sw_{key_id}.", f"sw_{key_id}", secret + "x", f"sw_key_00.{body}"):
        answer = await Client(server.session, server.base, attempt).get("/v1/holds")
        assert answer.status == 401, attempt
        assert answer.json["code"] == "invalid_api_key"
    assert (await Client(server.session, server.base, secret).get("/v1/holds")).status == 200


@pytest.mark.parametrize("config_overrides", [{"key_pepper": PEPPER}])
async def test_with_a_pepper_new_keys_are_peppered_and_older_keys_still_work(
    server: Server, config_overrides: dict[str, Any]
) -> None:
    unpeppered_id, unpeppered = await _make(server, KeyHasher(log_n=6), agent="before")
    legacy = "sw_" + "L" * 43  # keys from before scrypt: plain SHA-256, or its HMAC
    legacy_peppered = "sw_" + "P" * 43
    for key_id, stored in (
        ("key_legacy", hashlib.sha256(legacy.encode()).hexdigest()),
        (
            "key_legacy_hmac",
            hmac.new(PEPPER.encode(), legacy_peppered.encode(), "sha256").hexdigest(),
        ),
    ):
        server.sql(
            "INSERT INTO api_keys (id, key_hash, tenant, agent_id, role, priority, created_us)"
            " VALUES (?, ?, 'acme', 'legacy', 'agent', 50, 0)",
            key_id,
            stored,
        )
    key_id, secret = await _make(server, KeyHasher(PEPPER.encode(), log_n=6))
    stored = _stored(server, key_id)
    assert stored.startswith("scryptp$6$8$1$")
    peppered_input = hmac.new(PEPPER.encode(), secret.encode(), hashlib.sha256).digest()
    expected = hashlib.scrypt(peppered_input, salt=key_id.encode(), n=2**6, r=8, p=1, dklen=32)
    assert base64.urlsafe_b64decode(stored.split("$")[-1] + "=") == expected
    assert _stored(server, unpeppered_id).startswith("scrypt$6$")
    for made in (secret, unpeppered, legacy, legacy_peppered):
        assert (await Client(server.session, server.base, made).get("/v1/holds")).status == 200


async def test_a_key_made_under_a_pepper_the_server_lacks_is_refused(server: Server) -> None:
    _, secret = await _make(server, KeyHasher(b"another pepper", log_n=6))
    answer = await Client(server.session, server.base, secret).get("/v1/holds")
    assert answer.status == 401


@pytest.mark.parametrize("config_overrides", [{"key_pepper": PEPPER}])
async def test_a_key_made_under_another_pepper_is_refused(
    server: Server, config_overrides: dict[str, Any]
) -> None:
    _, secret = await _make(server, KeyHasher(b"another pepper", log_n=6))
    answer = await Client(server.session, server.base, secret).get("/v1/holds")
    assert answer.status == 401
