"""API keys over their life: created once, shown once, checked by a keyed
hash, stored again when made under an older scheme, revoked by id."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import re
import secrets
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, text

from slotward.api.bootstrap import bootstrap, open_store
from slotward.api.config import Config
from slotward.api.http.app import build_app
from slotward.api.keyhash import KeyHasher
from slotward.api.keys import create_key, revoke_key
from slotward.engine.clock import FixedClock
from slotward.engine.model import Principal
from tests.e2e.conftest import HOLD_BODY, Answer, Client, Server, serving
from tests.e2e.test_cli import _run

CACHE_SECONDS = 0.05
PEPPER = "p3pper-for-tests"


@pytest.fixture
def config_overrides() -> dict[str, Any]:
    return {"key_cache_seconds": CACHE_SECONDS}


def scrypt_form(secret: str, key_id: str, log_n: int = 14, pepper: bytes | None = None) -> str:
    """The stored form of a key made before HMAC: scrypt salted by its id, as
    slotward made it (cost 2^log_n, r = 8, p = 1; the input HMAC'd under the
    pepper first for ``scryptp``)."""
    data = secret.encode()
    if pepper is not None:
        data = hmac.new(pepper, data, hashlib.sha256).digest()
    digest = hashlib.scrypt(
        data, salt=key_id.encode(), n=2**log_n, r=8, p=1, maxmem=2**26, dklen=32
    )
    scheme = "scrypt" if pepper is None else "scryptp"
    return f"{scheme}${log_n}$8$1${base64.urlsafe_b64encode(digest).rstrip(b'=').decode()}"


def hmac_form(secret: str, pepper: bytes | None = None) -> str:
    """The stored form of a key today, recomputed here to pin it."""
    key = pepper if pepper is not None else b"slotward api key, no pepper"
    digest = hmac.new(key, b"slotward api key v1\x00" + secret.encode(), "sha256").digest()
    scheme = "hmac" if pepper is None else "hmacp"
    return f"{scheme}${base64.urlsafe_b64encode(digest).rstrip(b'=').decode()}"


def old_keys(db: Engine, count: int, log_n: int, pepper: bytes | None = None) -> list[str]:
    """Store ``count`` keys of agents ``old-<n>`` as scrypt, as slotward made them
    before HMAC; their secrets."""
    made: list[tuple[str, str]] = []
    for _ in range(count):
        key_id = f"key_{secrets.token_hex(8)}"
        made.append((key_id, f"sw_{key_id}.{secrets.token_urlsafe(32)}"))
    rows = [
        {"id": key_id, "hash": scrypt_form(secret, key_id, log_n, pepper), "agent": f"old-{n}"}
        for n, (key_id, secret) in enumerate(made)
    ]
    with db.begin() as conn:
        conn.execute(
            text(
                "INSERT INTO api_keys (id, key_hash, tenant, agent_id, role, priority, created_us)"
                " VALUES (:id, :hash, 'acme', :agent, 'agent', 50, 0)"
            ),
            rows,
        )
    return [secret for _, secret in made]


def _id(secret: str) -> str:
    return secret.removeprefix("sw_").split(".")[0]


def _guess(secret: str, n: int) -> str:
    """A wrong secret for the key id of ``secret``."""
    body = secret.split(".")[1]
    guess = f"sw_{_id(secret)}.{n:04d}{body[4:]}"
    assert guess != secret
    return guess


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


async def _call(server: Server, secret: str, base: str | None = None) -> Answer:
    return await Client(server.session, base or server.base, secret).get("/v1/holds")


@contextlib.asynccontextmanager
async def restarted(url: str, clock: FixedClock, **overrides: Any) -> AsyncIterator[str]:
    """Another server process on the same database (nothing cached); its base URL."""
    config = Config(db_url=url, **overrides)
    services = await bootstrap(config, store=await open_store(config), clock=clock)
    async with serving(build_app(services, config, sweep=False)) as base:
        yield base


async def test_a_revoked_key_is_refused_once_the_cache_forgets_it(server: Server) -> None:
    agent = await server.key()
    other = await server.key(agent="agent-b")
    assert (await agent.create(dict(HOLD_BODY))).status == 201
    key_id = server.sql("SELECT id FROM api_keys WHERE agent_id = 'agent-a'")[0][0]
    await server.services.store.write(lambda uow: revoke_key(uow, key_id, server.clock))
    server.clock.advance(CACHE_SECONDS * 4)  # past the key cache's lifetime (its clock's)
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
    secret = re.search(rf"\bsw_{key_id}\.[A-Za-z0-9_-]{{43}}\b", made.stdout)
    assert secret is not None, made.stdout
    with contextlib.closing(sqlite3.connect(db)) as conn:
        stored = conn.execute("SELECT key_hash FROM api_keys").fetchone()[0]
    assert stored == hmac_form(secret.group(0))  # no pepper set
    revoked = _run(db, "keys", "revoke", key_id)
    assert revoked.returncode == 0, revoked.stderr
    assert revoked.stdout.startswith(f"revoked {key_id}")
    again = _run(db, "keys", "revoke", key_id)
    assert again.returncode == 2
    assert "key_not_found" in again.stderr
    assert _run(db, "keys", "revoke", "key_nope").returncode == 2


async def test_keys_are_stored_as_an_hmac_of_the_whole_key(server: Server) -> None:
    key_id, secret = await _make(server, KeyHasher())  # as `keys create` without a pepper
    assert secret.startswith(f"sw_{key_id}.")
    stored = _stored(server, key_id)
    assert stored == hmac_form(secret)
    assert secret.split(".")[1] not in stored
    assert (await _call(server, secret)).status == 200


async def test_a_wrong_secret_for_a_real_key_id_is_refused(server: Server) -> None:
    key_id, secret = await _make(server, KeyHasher())
    body = secret.split(".")[1]
    forged = f"sw_{key_id}.{body[:-1]}{'A' if body[-1] != 'A' else 'B'}"
    for attempt in (forged, f"sw_{key_id}.", f"sw_{key_id}", secret + "x", f"sw_key_00.{body}"):
        answer = await _call(server, attempt)
        assert answer.status == 401, attempt
        assert answer.json["code"] == "invalid_api_key"
    assert (await _call(server, secret)).status == 200


@pytest.mark.parametrize("stored_as", ["hmac", "scrypt"])
async def test_wrong_guesses_for_a_key_id_never_refuse_its_owner(
    server: Server, stored_as: str
) -> None:
    if stored_as == "hmac":
        secret = (await _make(server, server.services.keys.hasher))[1]
    else:
        (secret,) = old_keys(server.db, 1, log_n=6)
    for n in range(50):  # this process has never seen the owner's key
        guessed = await _call(server, _guess(secret, n))
        assert guessed.status == 401, guessed.body
        assert guessed.json["code"] == "invalid_api_key"
    assert (await _call(server, secret)).status == 200
    more = await asyncio.gather(*(_call(server, _guess(secret, 50 + n)) for n in range(20)))
    assert {a.status for a in more} == {401}
    assert (await _call(server, secret)).status == 200


def _seen(answer: Answer) -> tuple[int, dict[str, str], bytes]:
    return answer.status, {k: v for k, v in answer.headers.items() if k != "Date"}, answer.body


async def test_an_unknown_key_id_a_revoked_key_and_a_wrong_secret_are_answered_alike(
    server: Server,
) -> None:
    secret = (await _make(server, server.services.keys.hasher))[1]
    revoked_id, revoked = await _make(server, server.services.keys.hasher, agent="gone")
    await server.services.store.write(lambda uow: revoke_key(uow, revoked_id, server.clock))
    for n in range(12):  # as many guesses as once locked a key id
        await _call(server, _guess(secret, n))
    wrong = await _call(server, _guess(secret, 12))
    unknown = await _call(server, f"sw_key_{'f' * 16}.{secret.split('.')[1]}")
    assert _seen(wrong) == _seen(unknown) == _seen(await _call(server, revoked))
    assert wrong.status == 401
    assert wrong.json["code"] == "invalid_api_key"


async def test_two_hundred_never_seen_keys_at_once_are_all_served(server: Server) -> None:
    made = [
        await _make(server, server.services.keys.hasher, agent=f"fleet-{n}") for n in range(200)
    ]
    answers = await asyncio.gather(*(_call(server, secret) for _, secret in made))
    assert [a.status for a in answers] == [200] * 200, {a.body for a in answers}


async def test_two_hundred_scrypt_keys_at_once_are_served_and_stored_again(
    server: Server,
) -> None:
    olds = old_keys(server.db, 200, log_n=10)
    answers = await asyncio.gather(*(_call(server, secret) for secret in olds))
    assert [a.status for a in answers] == [200] * 200, {a.body for a in answers}
    assert [_stored(server, _id(s)) for s in olds] == [hmac_form(s) for s in olds]


async def test_a_scrypt_key_is_stored_again_as_hmac_and_works_after_a_restart(
    server: Server, database: tuple[str, Engine]
) -> None:
    (old,) = old_keys(server.db, 1, log_n=14)  # the cost `keys create` used
    assert _stored(server, _id(old)).startswith("scrypt$14$8$1$")
    assert (await _call(server, _guess(old, 0))).status == 401
    assert _stored(server, _id(old)).startswith("scrypt$")  # a wrong secret changes nothing
    assert (await _call(server, old)).status == 200
    assert _stored(server, _id(old)) == hmac_form(old)
    async with restarted(database[0], server.clock) as base:
        assert (await _call(server, old, base)).status == 200
        assert (await _call(server, _guess(old, 1), base)).status == 401
    assert _stored(server, _id(old)) == hmac_form(old)


@pytest.mark.parametrize("config_overrides", [{"key_pepper": PEPPER}])
async def test_with_a_pepper_new_keys_are_peppered_and_older_keys_still_work(
    server: Server, config_overrides: dict[str, Any]
) -> None:
    unpeppered_id, unpeppered = await _make(server, KeyHasher(), agent="before")
    legacy = "sw_" + "L" * 43  # keys from before key ids: plain SHA-256, or its HMAC
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
    (scrypt,) = old_keys(server.db, 1, log_n=6)
    (scryptp,) = old_keys(server.db, 1, log_n=6, pepper=PEPPER.encode())
    key_id, secret = await _make(server, server.services.keys.hasher)
    assert _stored(server, key_id) == hmac_form(secret, PEPPER.encode())
    assert _stored(server, unpeppered_id) == hmac_form(unpeppered)
    for made in (secret, unpeppered, legacy, legacy_peppered, scrypt, scryptp):
        assert (await _call(server, made)).status == 200, made
    # Stored again under the pepperedness they were made with.
    assert _stored(server, _id(scrypt)) == hmac_form(scrypt)
    assert _stored(server, _id(scryptp)) == hmac_form(scryptp, PEPPER.encode())


@pytest.mark.parametrize("config_overrides", [{"key_pepper": PEPPER}])
async def test_a_key_stored_under_a_pepper_does_not_verify_without_it(
    server: Server, database: tuple[str, Engine], config_overrides: dict[str, Any]
) -> None:
    peppered = (await _make(server, server.services.keys.hasher))[1]
    (upgraded,) = old_keys(server.db, 1, log_n=6, pepper=PEPPER.encode())
    assert (await _call(server, upgraded)).status == 200  # now stored as hmacp
    assert _stored(server, _id(upgraded)).startswith("hmacp$")
    _, unpeppered = await _make(server, KeyHasher(), agent="plain")
    async with restarted(database[0], server.clock) as base:  # the pepper forgotten
        for secret in (peppered, upgraded):
            refused = await _call(server, secret, base)
            assert refused.status == 401
            assert refused.json["code"] == "invalid_api_key"
        assert (await _call(server, unpeppered, base)).status == 200
    async with restarted(database[0], server.clock, key_pepper="another pepper") as base:
        assert (await _call(server, peppered, base)).status == 401
        assert (await _call(server, unpeppered, base)).status == 200
    async with restarted(database[0], server.clock, key_pepper=PEPPER) as base:
        for secret in (peppered, upgraded, unpeppered):
            assert (await _call(server, secret, base)).status == 200


async def test_a_key_made_under_a_pepper_the_server_lacks_is_refused(server: Server) -> None:
    _, secret = await _make(server, KeyHasher(b"another pepper"))
    answer = await _call(server, secret)
    assert answer.status == 401
    assert answer.json["code"] == "invalid_api_key"
