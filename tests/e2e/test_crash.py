"""Crash test: a server killed with SIGKILL again and again while agents work.

One ``slotward serve`` process, on SQLite and on PostgreSQL. Eight agents (two
tenants) run a seeded plan (tests/e2e/crash_plan.py, seed ``SLOTWARD_CRASH_SEED``):
creates over a few overlapping slots with duplicates and reworded retries,
commits and releases of the holds they got, ``/v1/executions`` acquires with
short leases and completions of every outcome. The server is SIGKILLed at the
plan's kill points, ``KILLS`` times: right after the call has gone out, or once
its answer has arrived, which the client then drops (a call that acted and
lost its answer). It is restarted on the same port each time. A client whose
answer was lost records an indeterminate call and retries it: the retry must
land once. Every call is
labelled with its intent (``Call.intent``).

Afterwards (the server stopped with SIGTERM) the verdict of tests/e2e/recheck.py:
the history checker (``slotward.testing.history``) finds nothing, every
acknowledged create, commit and release has its outbox event and its audit
entry, the audit chains verify, no hold record is left ``executing``. Then every
execution record left ``executing`` has a lease that ran out: a duplicate takes
it over (201) and the dead holder's token is fenced.

On any failure the message names the seed, a JSON file with the history and
the snapshot it was checked against, and the command that re-checks it offline.
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from slotward.testing.recorded import Call
from slotward.testing.snapshot import load_snapshot, sync_url
from tests.conftest import TEMPLATE
from tests.e2e.crash_plan import KILLS, MAX_LEASE, Plan, acquire_label, make_plan
from tests.e2e.crash_recorder import Agent, Recorder, tracing
from tests.e2e.crash_workload import (
    _DATABASES,
    SEED_VARIABLE,
    TENANTS,
    Kills,
    Server,
    complete_intent,
    crash_seed,
    make_agents,
    run_plan,
)
from tests.e2e.history_file import OutboxRow, Recording, load, save
from tests.e2e.recheck import problems
from tests.pgserver import PgServer

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(params=["sqlite", "postgres"])
def database(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'crash.db'}"
    postgres: PgServer = request.getfixturevalue("postgres")
    return postgres.create_database(f"crash_{next(_DATABASES)}", template=TEMPLATE)


async def test_sigkill_at_seeded_points_keeps_every_promise(
    database: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    seed = crash_seed(os.environ)
    agents = await make_agents(database)
    plan = make_plan(seed, [a.name for a in agents])
    server = Server(database, tmp_path / "server.log")
    evidence = _Evidence(tmp_path / "crash-history.json", database, request.node.nodeid)
    evidence.run.update(seed=seed, kill_at=list(plan.kill_at), plan_length=plan.length,
                        lose_answer=list(plan.lose_answer))  # fmt: skip
    try:
        await asyncio.to_thread(server.start)
        async with _session() as session:
            rec = Recorder(server.base, session, evidence.calls, evidence.planned)
            await run_plan(server, agents, plan, rec, evidence.kills)
        evidence.run["lost_answers"] = {str(i): code for i, (code, _, _) in rec.lost.items()}
        assert await asyncio.to_thread(server.stop) == 0  # SIGTERM: a clean shutdown
        recording = evidence.keep("after the workload")
        found = problems(recording)
        assert found == [], "\n".join(found)
        await _check_leases(server, agents, recording, evidence)
        calls = recording.calls
        assert len(evidence.kills.after) == KILLS >= 20
        assert server.starts == KILLS + 2
        assert not [c for c in calls if c.status is not None and c.status >= 500]
        assert {c.op for c in calls if c.fresh} >= {"create", "commit", "release", "complete"}
        assert any(c.status is None for c in calls)  # the crashes did cut answers off
        _check_lost_answers(plan, rec.lost, calls, evidence)
        assert all(c.intent for c in calls)
    except Exception as exc:
        server.ensure_stopped()
        raise AssertionError(evidence.failure(exc, seed)) from exc
    finally:
        server.ensure_stopped()


def _check_lost_answers(
    plan: Plan, lost: dict[int, tuple[int, bytes, dict[str, str]]], calls: Sequence[Call],
    evidence: _Evidence,
) -> None:  # fmt: skip
    """Each answer dropped at a kill came before that kill; and a change the server
    had acknowledged (2xx) is answered again by the retry's replay, byte for byte.
    (A lease granted and lost is not replayed: its retry waits out the lease.)"""
    attempts: dict[int, list[Call]] = {}
    for call, index in zip(calls, evidence.planned[: len(calls)], strict=True):
        if index is not None:
            attempts.setdefault(index, []).append(call)
    losing = [i for i, lose in zip(plan.kill_at, plan.lose_answer, strict=True) if lose]
    assert set(lost) <= set(losing)
    killed = dict(zip(evidence.kills.after, evidence.kills.at, strict=False))
    for index, (status, body, _) in lost.items():
        mine = attempts[index]
        dropped = next(c for c in mine if c.status is None)
        assert dropped.invoked_at <= killed[index] <= (dropped.completed_at or 0), index
        later = [c for c in mine[mine.index(dropped) + 1 :] if c.status is not None]
        if 200 <= status < 300 and dropped.op != "acquire" and later:
            assert later[0].ok, later[0]
            assert later[0].header("Idempotent-Replayed") == "true", later[0]
            assert later[0].body == body, (index, later[0])


@asynccontextmanager
async def _session() -> AsyncIterator[aiohttp.ClientSession]:
    connector = aiohttp.TCPConnector(force_close=True, limit=0)
    timeout = aiohttp.ClientTimeout(total=20)
    async with aiohttp.ClientSession(
        connector=connector, timeout=timeout, trace_configs=[tracing()]
    ) as session:
        yield session


@dataclass
class _Evidence:
    """The latest history and its snapshot, saved to ``path`` as it is taken."""

    path: Path
    database: str
    node: str
    calls: list[Call] = field(default_factory=list)
    planned: list[int | None] = field(default_factory=list)  # the plan index of each call
    kills: Kills = field(default_factory=Kills)
    run: dict[str, Any] = field(default_factory=dict)
    saved: str = ""  # the stage of the recording saved last

    def keep(self, stage: str) -> Recording:
        """The calls so far and the store as it is now (the server stopped), saved; the
        file must read back as it was written."""
        now = datetime.now(UTC)  # the checker's now: the snapshot is read right after
        run = {**self.run, "stage": stage, "kills": list(self.kills.after),
               "killed_at": list(self.kills.at), "planned": list(self.planned)}  # fmt: skip
        recording = Recording(tuple(self.calls), load_snapshot(self.database), now,
                              _outbox(self.database), run)  # fmt: skip
        save(self.path, recording)
        self.saved = stage
        assert load(self.path) == recording
        return recording

    def failure(self, exc: Exception, seed: int) -> str:
        where = f"the history and snapshot {self.saved}"
        if not self.saved:  # the workload itself failed: what it recorded, and the store
            where = "what the workload recorded and the store as the failure left it"
            try:
                self.keep("the workload failed")
            except Exception as error:  # the failure above is the news, not this one
                where = f"nothing: saving failed ({error!r})"
        first: BaseException = exc
        while isinstance(first, BaseExceptionGroup):  # a client's error, out of the TaskGroup
            first = first.exceptions[0]
        said = str(first).splitlines() or [""]  # in full in the traceback it is chained to
        return "\n".join([
            f"{type(first).__name__}: {said[0][:300]}",
            f"crash run with {SEED_VARIABLE}={seed}, killed after planned calls "
            f"{self.kills.after}",
            f"saved in {self.path}: {where}",
            f"re-check it offline: cd {ROOT} && {sys.executable} -m tests.e2e.recheck {self.path}",
            f"run it again: cd {ROOT} && {SEED_VARIABLE}={seed} {sys.executable} -m pytest -q "
            f"'{self.node}'",
        ])  # fmt: skip


def _outbox(url: str) -> tuple[OutboxRow, ...]:
    engine = create_engine(sync_url(url), poolclass=NullPool)
    try:
        with engine.connect() as conn:
            rows = conn.execute(text("SELECT tenant, type, hold_id FROM outbox ORDER BY id")).all()
    finally:
        engine.dispose()
    return tuple(OutboxRow(r.tenant, r.type, r.hold_id) for r in rows)


async def _check_leases(
    server: Server, agents: list[Agent], recording: Recording, evidence: _Evidence
) -> None:
    """Every execution still executing had a lease of what was asked, now over: a
    duplicate takes it over, the old token is fenced, the new one completes."""
    calls, snapshot = recording.calls, recording.snapshot
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
    retry = random.Random(f"{recording.run['seed']}:leases")
    await asyncio.to_thread(server.start)
    async with _session() as session:
        rec = Recorder(server.base, session, evidence.calls, evidence.planned)
        for record in executing:
            agent = owner[record.tenant, str(record.agent_id)]
            body = {**bodies[record.workflow_id], "lease_seconds": 30}
            intent = f"{agent.tenant} {acquire_label(str(record.workflow_id), str(record.tool))}"
            taken = await rec.send(agent, "acquire", "/v1/executions", [body], retry,
                                   intent=intent)  # fmt: skip
            assert taken.status == 201, (record, taken)
            lease = taken.document()
            assert lease["lease_token"] != record.lease_token
            path = f"/v1/executions/{lease['key']}/complete"
            old = {"lease_token": record.lease_token, "outcome": "succeeded", "result": "late"}
            stale = complete_intent(agent.tenant, {**lease, **old})
            fenced = await rec.send(agent, "complete", path, [old], retry, target=lease["key"],
                                    intent=stale)  # fmt: skip
            assert fenced.status == 409
            new = {**old, "lease_token": lease["lease_token"], "result": "done"}
            done = await rec.send(agent, "complete", path, [new], retry, target=lease["key"],
                                  intent=complete_intent(agent.tenant, lease))  # fmt: skip
            assert done.status == 200
        for tenant in TENANTS:
            agent = next(a for a in agents if a.tenant == tenant)
            headers = {"Authorization": f"Bearer {agent.secret}"}
            async with session.get(f"{server.base}/v1/audit/verify", headers=headers) as resp:
                assert (await resp.json())["ok"] is True
    assert await asyncio.to_thread(server.stop) == 0
    final = evidence.keep("after the lease takeovers")
    found = problems(final)
    assert found == [], "\n".join(found)
    assert not [r for r in final.snapshot.ledger if r.state == "executing"]
