"""Approvals raced across two server processes on one PostgreSQL.

Agents whose commits a tenant's policy gates send each commit several times at
once, long-poll their approvals, and commit again; two reviewers decide every
approval at the same moment, sending the other decision or the same one.
Afterwards: one approval per hold however many commits raced, one decision per
approval (the loser of a split is told `approval_decided`, the twin of the same
decision gets its replay), every long poll answered with the decision
that stands, approved holds committed once and denied ones refused, the audit
chain whole, and the history checker (``slotward.testing.history``) finds every
answer consistent with the database (a 202 acknowledges nothing).
"""

from __future__ import annotations

import asyncio
import json
import random
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

import aiohttp
from sqlalchemy import create_engine, text
from sqlalchemy.pool import NullPool

from slotward.adapters.store.postgres.store import PostgresStore
from slotward.api.keys import create_key
from slotward.engine.clock import SystemClock, TimeOrderedIds
from slotward.engine.model import Principal, Role
from slotward.testing.history import Call, check
from slotward.testing.snapshot import load_snapshot
from tests.e2e.test_multiprocess import _post, _post_get
from tests.e2e.test_pg_attendee_race import two_processes

__all__ = ["two_processes"]  # the fixture, from the attendee race

AGENTS = 12
COMMITS_AT_ONCE = 4


async def _people(url: str) -> tuple[list[str], list[str], str]:
    """The agents' keys, two reviewers' and an admin's, of tenant ``race``."""
    store = await PostgresStore.open(url, timedelta(hours=24))
    clock, ids = SystemClock(), TimeOrderedIds()

    async def key(agent: str, role: Role) -> str:
        principal = Principal("race", agent, role, 50)
        made = await store.write(partial(create_key, principal=principal, clock=clock, ids=ids))
        return made.secret

    try:
        agents = [await key(f"agent-{i}", "agent") for i in range(AGENTS)]
        reviewers = [await key(f"reviewer-{i}", "reviewer") for i in range(2)]
        admin = await key("ops", "admin")
    finally:
        await store.close()
    return agents, reviewers, admin


async def _send(
    session: aiohttp.ClientSession, method: str, url: str, key: str, body: Any = None
) -> tuple[int, Any, str | None]:
    """The status, the document and ``Idempotent-Replayed`` of one call."""
    headers = {"Authorization": f"Bearer {key}"}
    data = None if body is None else json.dumps(body)
    async with session.request(method, url, data=data, headers=headers) as resp:
        doc = await resp.json(content_type=None)
        return resp.status, doc, resp.headers.get("Idempotent-Replayed")


def _rows(url: str, sql: str) -> list[tuple[Any, ...]]:
    engine = create_engine(url.replace("+asyncpg", "+psycopg"), poolclass=NullPool)
    try:
        with engine.connect() as conn:
            return [tuple(r) for r in conn.execute(text(sql))]
    finally:
        engine.dispose()


async def test_gated_commits_and_decisions_race_across_two_processes(
    two_processes: tuple[str, str],
) -> None:
    base, url = two_processes
    agents, reviewers, admin = await _people(url)
    history: list[Call] = []
    rng = random.Random(18)
    connector = aiohttp.TCPConnector(force_close=True, limit=200)
    async with aiohttp.ClientSession(connector=connector) as s:
        policy = {"require_approval": {"attendees_more_than": 1}}
        assert (await _send(s, "PUT", f"{base}/v1/approval-policy", admin, policy))[0] == 200
        holds = []
        for i, key in enumerate(agents):
            body = {"workflow_id": f"wf-{i}", "attendees": [f"a{i}@example.com",
                    f"b{i}@example.com"], "start": "2031-07-01T10:00:00Z",
                    "duration_minutes": 30}  # fmt: skip
            made = await _post(s, f"{base}/v1/holds", key, body,
                               (history, "create", i, None, f"create {i}"))  # fmt: skip
            holds.append(json.loads(made["body"]))

        def commit(i: int) -> Any:
            hold = holds[i]
            return _post(s, f"{base}/v1/holds/{hold['id']}/commit", agents[i],
                         {"token": hold["token"]},
                         (history, "commit", i, hold["id"], f"commit {i}"))  # fmt: skip

        gated = await asyncio.gather(*(commit(i) for i in range(AGENTS)
                                       for _ in range(COMMITS_AT_ONCE)))  # fmt: skip
        assert {a["status"] for a in gated} == {202}
        approval_of: dict[str, set[str]] = {}
        for answer in gated:
            doc = json.loads(answer["body"])
            approval_of.setdefault(doc["hold"]["id"], set()).add(doc["approval"]["id"])
        assert all(len(ids) == 1 for ids in approval_of.values()), approval_of
        per_hold = _rows(url, "SELECT hold_id, count(*) FROM approvals GROUP BY hold_id")
        assert sorted(n for _, n in per_hold) == [1] * AGENTS

        approvals = [next(iter(approval_of[h["id"]])) for h in holds]
        polls = [
            asyncio.create_task(_send(s, "GET", f"{base}/v1/approvals/{a}?wait=60", agents[i]))
            for i, a in enumerate(approvals)
        ]
        # Two reviewers at once on every approval. A third of them, the two send the
        # other decision (who wins is the race's); the rest send the same one, a
        # third approve and a third deny (one answer fresh, the other its replay),
        # so approved and denied holds both follow, whatever the scheduling.
        plans = [("approve", "deny"), ("approve", "approve"), ("deny", "deny")]
        decisions = []
        for n, a in enumerate(approvals):
            both = list(zip(plans[n % 3], reviewers, strict=True))
            rng.shuffle(both)
            decisions.append(asyncio.gather(*(
                _send(s, "POST", f"{base}/v1/approvals/{a}/decision", k, {"decision": d})
                for d, k in both
            )))  # fmt: skip
        decided = await asyncio.gather(*decisions)
        stands: dict[str, str] = {}
        for n, (a, pair) in enumerate(zip(approvals, decided, strict=True)):
            if n % 3 == 0:  # the other decision: one stands, the other is told so
                assert sorted(status for status, _, _ in pair) == [200, 409], pair
                winner = next(doc for status, doc, _ in pair if status == 200)
                loser = next(doc for status, doc, _ in pair if status == 409)
                assert loser["code"] == "approval_decided"
            else:  # the same decision: recorded once, the other answer replays it
                assert [status for status, _, _ in pair] == [200, 200], pair
                assert sorted(str(replayed) for _, _, replayed in pair) == ["false", "true"]
                assert pair[0][1] == pair[1][1]
                winner = pair[0][1]
            stands[a] = winner["status"]
        assert set(stands.values()) == {"approved", "denied"}
        for a, poll in zip(approvals, polls, strict=True):
            status, doc, _ = await asyncio.wait_for(poll, 30)
            assert (status, doc["status"]) == (200, stands[a])

        final = await asyncio.gather(*(commit(i) for i in range(AGENTS)
                                       for _ in range(COMMITS_AT_ONCE)))  # fmt: skip
        verified = await _post_get(s, f"{base}/v1/audit/verify", admin)
    for n, answer in enumerate(final):
        i = n // COMMITS_AT_ONCE
        if stands[approvals[i]] == "approved":
            assert answer["status"] == 200, answer
        else:
            assert answer["status"] == 409, answer
            assert json.loads(answer["body"])["code"] == "approval_denied"
    committed = [r[0] for r in _rows(url, "SELECT id FROM holds WHERE status = 'committed'")]
    approved = [h["id"] for h, a in zip(holds, approvals, strict=True) if stands[a] == "approved"]
    assert sorted(committed) == sorted(approved)
    decisions_logged = _rows(
        url, "SELECT count(*) FROM audit_log WHERE action IN ('approval.approve', 'approval.deny')"
    )
    assert decisions_logged == [(AGENTS,)]
    assert verified["ok"] is True, verified
    assert check(history, load_snapshot(url), datetime.now(UTC)) == []
