"""Migration 0006: ledger.status_code becomes ledger.created, every answer kept.

The real server writes a ledger (a hold placed and committed, an execution
completed, one still running); the database is taken back to revision 0005,
where each row holds the number the code before 0006 stored (201 for a
creation, 200 for a commit or a completion, 0 while executing), set here by
key as that code wrote it. Then the real server opens it again, which
migrates it, and every duplicate gets the first answer, status and bytes.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from alembic import command
from alembic.config import Config as AlembicConfig
from sqlalchemy import Engine, inspect, text

from slotward.adapters.store import migrate
from slotward.adapters.store import tables as t
from slotward.api.bootstrap import bootstrap, open_store
from slotward.api.config import Config
from slotward.api.http.app import build_app
from slotward.engine.clock import FixedClock
from tests.e2e.conftest import HOLD_BODY, START, Answer, Client, Server, serving
from tests.integration.databases import empty_database

EXECUTION = {"workflow_id": "wf-mail", "tool": "send_email", "arguments": {"to": "ana@x.org"}}
# What the code before 0006 stored under each client key.
OLD_STATUS = {"create": 201, "commit": 200, "mail-done": 200, "mail-running": 0}


@pytest.fixture(params=["sqlite", "postgres"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, Engine]]:
    url, engine = empty_database(request, tmp_path, request.param, "migration6")
    yield url, engine
    engine.dispose()


@asynccontextmanager
async def running(url: str, db: Engine, clock: FixedClock) -> AsyncIterator[Server]:
    """The real server on ``url``: opening it migrates the database to head."""
    config = Config(db_url=url)
    services = await bootstrap(config, store=await open_store(config), clock=clock)
    app = build_app(services, config, sweep=False)
    async with serving(app) as base, aiohttp.ClientSession() as session:
        yield Server(services, clock, db, base, session)


def key(name: str) -> dict[str, str]:
    return {"Idempotency-Key": name}


async def first_calls(agent: Client) -> dict[str, Answer]:
    created = await agent.create(HOLD_BODY, headers=key("create"))
    hold = created.json
    committed = await agent.commit(hold["id"], hold["token"], headers=key("commit"))
    acquired = await agent.post("/v1/executions", EXECUTION, headers=key("mail-done"))
    done = await agent.post(
        "/v1/executions/mail-done/complete",
        {"lease_token": acquired.json["lease_token"], "outcome": "succeeded", "result": 1},
    )
    running_call = {**EXECUTION, "arguments": {"to": "bo@x.org"}}
    await agent.post("/v1/executions", running_call, headers=key("mail-running"))
    return {"create": created, "commit": committed, "acquire": acquired, "done": done}


async def duplicates(agent: Client, hold: dict[str, Any]) -> dict[str, Answer]:
    running_call = {**EXECUTION, "arguments": {"to": "bo@x.org"}}
    return {
        "create": await agent.create(HOLD_BODY, headers=key("create")),
        "commit": await agent.commit(hold["id"], hold["token"], headers=key("commit")),
        "mail-done": await agent.post("/v1/executions", EXECUTION, headers=key("mail-done")),
        "mail-running": await agent.post(
            "/v1/executions", running_call, headers=key("mail-running")
        ),
    }


def downgrade_to_0005(db: Engine) -> None:
    with db.begin() as conn:
        config = AlembicConfig()
        config.set_main_option("script_location", str(Path(migrate.__file__).parent / "migrations"))
        config.attributes["connection"] = conn
        command.downgrade(config, "0005")


def ledger(db: Engine, column: str) -> dict[str, Any]:
    with db.connect() as conn:
        found = conn.execute(text(f"SELECT key, {column} FROM ledger"))
        return {str(k).removeprefix("client:"): v for k, v in found}


async def test_every_first_answer_survives_the_migration(database: tuple[str, Engine]) -> None:
    url, db = database
    clock = FixedClock(START)
    async with running(url, db, clock) as server:
        agent = await server.key()
        first = await first_calls(agent)
        before = await duplicates(agent, first["create"].json)
    assert [first[c].status for c in ("create", "commit", "acquire", "done")] == [
        201,
        200,
        201,
        200,
    ]

    downgrade_to_0005(db)
    assert ledger(db, "status_code") == OLD_STATUS  # the downgrade puts the numbers back
    with db.begin() as conn:  # ... and these are the numbers the old code wrote
        for name, status in OLD_STATUS.items():
            conn.execute(
                text("UPDATE ledger SET status_code = :s WHERE key = :k"),
                {"s": status, "k": f"client:{name}"},
            )

    async with running(url, db, clock) as server:
        assert ledger(db, "created") == {
            "create": True, "commit": False, "mail-done": False, "mail-running": False,
        }  # fmt: skip
        after = await duplicates(await server.key(), first["create"].json)

    assert {name: a.status for name, a in after.items()} == {
        "create": 201, "commit": 200, "mail-done": 200, "mail-running": 409,
    }  # fmt: skip
    for name in ("create", "commit", "mail-done"):
        assert after[name].replayed, name
        assert (after[name].status, after[name].body) == (before[name].status, before[name].body)
    assert after["create"].body == first["create"].body  # byte for byte
    assert after["mail-running"].json["code"] == "request_in_progress"


def test_the_migrated_ledger_is_the_one_the_code_declares(database: tuple[str, Engine]) -> None:
    _, db = database
    with db.begin() as conn:
        migrate.upgrade(conn, "0006")
    columns = {c["name"]: c for c in inspect(db).get_columns("ledger")}
    assert set(columns) == {c.name for c in t.ledger.columns}
    assert all(columns[c.name]["nullable"] == c.nullable for c in t.ledger.columns)
    with db.begin() as conn:  # a boolean, whatever the backend calls it
        conn.execute(
            text(
                "INSERT INTO ledger (tenant, key, fingerprint, state, created, body, created_us,"
                " expires_us, kind) VALUES ('acme', 'k', 'f', 'succeeded', :c, :b, 1, 2, 'hold')"
            ),
            {"c": True, "b": b"{}"},
        )
    with db.connect() as conn:
        assert conn.execute(text("SELECT created FROM ledger")).scalar_one() in (True, 1)
