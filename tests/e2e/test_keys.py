"""API keys over their life: created once, shown once, revoked by id."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import re
from pathlib import Path
from typing import Any

import pytest

from slotward.api.auth import KeyHasher, create_key, revoke_key
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
    revoked = _run(db, "keys", "revoke", key_id)
    assert revoked.returncode == 0, revoked.stderr
    assert revoked.stdout.startswith(f"revoked {key_id}")
    again = _run(db, "keys", "revoke", key_id)
    assert again.returncode == 2
    assert "key_not_found" in again.stderr
    assert _run(db, "keys", "revoke", "key_nope").returncode == 2


PEPPER = "p3pper-for-tests"


@pytest.mark.parametrize("config_overrides", [{"key_pepper": PEPPER}])
async def test_with_a_pepper_keys_are_stored_as_hmacs_and_old_keys_still_work(
    server: Server, config_overrides: dict[str, Any]
) -> None:
    legacy = await server.key(agent="old")  # made before the pepper: plain SHA-256
    hasher = KeyHasher(PEPPER.encode())
    made = await server.services.store.write(
        lambda uow: create_key(
            uow, Principal("acme", "new", "agent", 50), server.clock, server.services.ids, hasher
        )
    )
    stored = server.sql("SELECT key_hash FROM api_keys WHERE id = ?", made.id)[0][0]
    assert stored == hmac.new(PEPPER.encode(), made.secret.encode(), hashlib.sha256).hexdigest()
    assert stored != hashlib.sha256(made.secret.encode()).hexdigest()
    peppered = Client(server.session, server.base, made.secret)
    assert (await peppered.get("/v1/holds")).status == 200
    assert (await legacy.get("/v1/holds")).status == 200


async def test_a_key_made_under_another_pepper_is_refused(server: Server) -> None:
    other = KeyHasher(b"another pepper")
    made = await server.services.store.write(
        lambda uow: create_key(
            uow, Principal("acme", "x", "agent", 50), server.clock, server.services.ids, other
        )
    )
    answer = await Client(server.session, server.base, made.secret).get("/v1/holds")
    assert answer.status == 401
