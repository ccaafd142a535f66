"""Crash test: a server killed with SIGKILL again and again while agents work.

One ``slotward serve`` process, on SQLite and on PostgreSQL. Seeded clients
(two tenants, four agents each) run a mixed workload: creates over a few
overlapping slots with duplicates and reworded retries, commits and releases
of the holds they got, ``/v1/executions`` acquires with short leases and
completions of every outcome. A killer SIGKILLs the server at seeded random
moments, at least ``KILLS`` times, and restarts it on the same port. A client
whose answer was lost (connection reset) records an indeterminate call and
retries it: the retry must land once.

Afterwards (the server stopped with SIGTERM) the history checker
(``slotward.engine.history``) holds every answer against the database, every
fresh create, commit and release has its outbox event and its audit entry,
the audit chains verify, no hold record is left ``executing``, and every
execution record left ``executing`` has a lease that ran out: a duplicate
takes it over (201) and the dead holder's token is fenced.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import aiohttp
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from slotward.adapters.store.snapshot import load_snapshot, sync_url
from slotward.engine.audit import verify_chain
from slotward.engine.executions import stored_key
from slotward.engine.history import Call, Snapshot, Violation, check
from tests.conftest import TEMPLATE
from tests.e2e.crash_workload import (
    _DATABASES,
    MAX_LEASE,
    SEED,
    TENANTS,
    Agent,
    Recorder,
    Server,
    _agents,
    _workload,
)
from tests.pgserver import PgServer


@pytest.fixture(params=["sqlite", "postgres"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'crash.db'}"
    postgres: PgServer = request.getfixturevalue("postgres")
    return postgres.create_database(f"crash_{next(_DATABASES)}", template=TEMPLATE)


async def test_sigkill_at_random_moments_keeps_every_promise(database: str, tmp_path: Path) -> None:
    agents = await _agents(database)
    server = Server(database, tmp_path / "server.log")
    try:
        await asyncio.to_thread(server.start)
        calls, kills = await _workload(server, agents)
        assert await asyncio.to_thread(server.stop) == 0  # SIGTERM: a clean shutdown
        snapshot = load_snapshot(database)
        violations = check(calls, snapshot, datetime.now(UTC))
        assert violations == [], _explain(violations, calls, snapshot)
        _check_effects(database, calls, snapshot)
        await _check_leases(server, agents, calls, snapshot)
    finally:
        server.ensure_stopped()
    assert kills >= 20
    assert server.starts == kills + 2
    assert not [c for c in calls if c.status is not None and c.status >= 500]
    assert {c.op for c in calls if c.fresh} >= {"create", "commit", "release", "complete"}
    assert any(c.status is None for c in calls)  # the crashes did cut answers off


def _check_effects(url: str, calls: list[Call], snapshot: Snapshot) -> None:
    """Every acknowledged change (a fresh answer, or a replay whose first answer a crash
    cut off) has its event and audit entry once; chains verify; no hold record is left
    executing."""
    assert not [r for r in snapshot.ledger if r.kind == "hold" and r.state == "executing"]
    engine = create_engine(sync_url(url), poolclass=NullPool)
    try:
        with engine.connect() as conn:
            rows = conn.execute(text("SELECT tenant, type, hold_id FROM outbox")).all()
    finally:
        engine.dispose()
    events = Counter((r.tenant, r.type, r.hold_id) for r in rows)
    assert [e for e, n in events.items() if n > 1] == []  # one event per transition
    audited = {(e.tenant, e.action, e.hold_id) for e in snapshot.audit if e.outcome == "fresh"}
    for call in (c for c in calls if c.ok and c.op in EFFECTS):
        said = call.document()
        action, event, status = EFFECTS[call.op]
        if said.get("status") != status:
            continue  # a release of a hold that had expired or was preempted: no change
        hold_id = str(said["id"])
        assert (call.tenant, event, hold_id) in events, call
        assert (call.tenant, action, hold_id) in audited, call
    for tenant in TENANTS:
        entries = [e for e in snapshot.audit if e.tenant == tenant]
        chain = verify_chain(entries)
        assert chain.ok, (tenant, chain)
        assert chain.count == len(entries) > 0


EFFECTS = {
    "create": ("hold.create", "hold.created", "held"),
    "commit": ("hold.commit", "hold.committed", "committed"),
    "release": ("hold.release", "hold.released", "released"),
}


async def _check_leases(
    server: Server, agents: list[Agent], calls: list[Call], snapshot: Snapshot
) -> None:
    """Every execution still executing had a lease of what was asked, now over: a
    duplicate takes it over, the old token is fenced, the new one completes."""
    executing = [r for r in snapshot.ledger if r.state == "executing"]
    assert executing  # the orphan at least
    last_answer = datetime.fromtimestamp(max(c.completed_at or 0.0 for c in calls), UTC)
    ends = [r.lease_expires_at for r in executing]
    assert all(
        end is not None and end <= last_answer + timedelta(seconds=MAX_LEASE) for end in ends
    )
    latest = max(end for end in ends if end is not None)
    await asyncio.sleep(max(0.0, (latest - datetime.now(UTC)).total_seconds()) + 0.05)
    bodies = {c.request["workflow_id"]: c.request for c in calls if c.op == "acquire"}
    owner = {(a.tenant, a.name): a for a in agents}
    rng = random.Random(SEED)
    await asyncio.to_thread(server.start)
    connector = aiohttp.TCPConnector(force_close=True)
    async with aiohttp.ClientSession(connector=connector) as session:
        rec = Recorder(server.base, session, list(calls))
        for record in executing:
            agent = owner[record.tenant, str(record.agent_id)]
            body = {**bodies[record.workflow_id], "lease_seconds": 30}
            taken = await rec.send(agent, "acquire", "/v1/executions", [body], rng)
            assert taken.status == 201, (record, taken)
            lease = taken.document()
            assert lease["lease_token"] != record.lease_token
            path = f"/v1/executions/{lease['key']}/complete"
            old = {"lease_token": record.lease_token, "outcome": "succeeded", "result": "late"}
            assert (await rec.send(agent, "complete", path, [old], rng, lease["key"])).status == 409
            new = {**old, "lease_token": lease["lease_token"], "result": "done"}
            assert (await rec.send(agent, "complete", path, [new], rng, lease["key"])).status == 200
        for tenant in TENANTS:
            agent = next(a for a in agents if a.tenant == tenant)
            headers = {"Authorization": f"Bearer {agent.secret}"}
            async with session.get(f"{server.base}/v1/audit/verify", headers=headers) as resp:
                assert (await resp.json())["ok"] is True
    assert await asyncio.to_thread(server.stop) == 0
    final = load_snapshot(server.url)
    assert check(rec.calls, final, datetime.now(UTC)) == []
    assert not [r for r in final.ledger if r.state == "executing"]


def _explain(violations: list[Violation], calls: list[Call], snapshot: Snapshot) -> str:
    """The violations with every call and stored row they name."""
    ids = {i for v in violations for i in v.ids}
    ids |= {k for k in map(stored_key, ids) if k}
    lines = [f"{v.rule}: {v.detail}" for v in violations]
    lines += [f"call {c}" for c in calls if ids & _named(c)]
    lines += [f"hold {h}" for h in snapshot.holds if ids & {h.id, h.key}]
    lines += [f"record {r}" for r in snapshot.ledger if ids & {r.key, str(r.hold_id)}]
    return "\n".join(lines)


def _named(call: Call) -> set[str]:
    return {str(x) for x in (call.key, call.target, call.document().get("id")) if x}
