"""API keys over their life: created once, shown once, revoked by id."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest

from slotward.api.auth import revoke_key
from tests.e2e.conftest import HOLD_BODY, Server
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
