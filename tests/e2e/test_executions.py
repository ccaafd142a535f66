"""The generic ledger over real HTTP: /v1/executions on SQLite and PostgreSQL.

Every ledger transition of DESIGN section 4: acquire, duplicate in progress,
completion (succeeded, failed_terminal, failed_retryable), replay, lease
expiry and takeover, fencing, retention with a stepping clock, and waiting.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any
from urllib.parse import quote

import pytest

from slotward.api.bootstrap import bootstrap
from slotward.api.config import Config
from slotward.api.http.app import build_app
from slotward.api.ledger import pause_until
from tests.e2e.conftest import Answer, Client, Server, serving, until
from tests.e2e.test_metrics import read_metrics, sample

CALL: dict[str, Any] = {
    "workflow_id": "wf-mail",
    "step": 1,
    "tool": "send_email",
    "arguments": {"to": ["ana@example.com", "bo@example.com"], "subject": "Hi", "body": "..."},
}


def call(**changes: Any) -> dict[str, Any]:
    return {**json.loads(json.dumps(CALL)), **changes}


async def acquire(client: Client, body: dict[str, Any] | None = None, **kw: Any) -> Answer:
    return await client.post("/v1/executions", body if body is not None else call(), **kw)


async def complete(
    client: Client, key: str | None, token: str, outcome: str = "succeeded", result: Any = None
) -> Answer:
    assert key is not None
    body = {"lease_token": token, "outcome": outcome, "result": result}
    return await client.post(f"/v1/executions/{key}/complete", body)


def ledger_rows(server: Server) -> list[tuple[Any, ...]]:
    return server.sql(
        "SELECT key, state, lease_token FROM ledger WHERE kind = 'execution' ORDER BY key"
    )


async def test_acquire_complete_and_replay(server: Server) -> None:
    agent = await server.key()
    first = await acquire(agent)
    assert first.status == 201, first.body
    assert first.json["state"] == "acquired"
    assert first.key == first.json["key"]
    assert str(first.key).startswith("idem_")
    assert not first.replayed
    assert first.json["lease_expires_at"] == "2030-10-01T09:00:30Z"  # default lease: 30 s

    done = await complete(agent, first.key, first.json["lease_token"], result={"id": "msg-1"})
    assert done.status == 200, done.body
    assert done.json == {"key": first.key, "state": "succeeded", "result": {"id": "msg-1"}}
    assert not done.replayed

    again = await acquire(agent, call(lease_seconds=60, agent_thought="send it again"))
    assert again.status == 200
    assert again.replayed
    assert again.key == first.key
    assert again.body == done.body  # the stored completion, byte for byte

    read = await agent.get(f"/v1/executions/{first.key}")
    assert read.status == 200
    assert read.json["state"] == "succeeded"
    assert read.json["result"] == {"id": "msg-1"}
    assert read.json["tool"] == "send_email"
    assert read.json["workflow_id"] == "wf-mail"
    assert "lease_token" not in read.json  # a capability: never shown to readers


async def test_a_duplicate_during_the_lease_is_in_progress(server: Server) -> None:
    agent = await server.key()
    first = await acquire(agent)
    server.clock.advance(10)
    dup = await acquire(agent)
    assert dup.status == 409
    assert dup.json["code"] == "request_in_progress"
    assert dup.json["retryable"] is True
    assert dup.headers["Retry-After"] == "20"  # the lease has 20 s left
    assert dup.key == first.key
    assert dup.json["lease_expires_at"] == first.json["lease_expires_at"]


async def test_a_terminal_failure_is_replayed(server: Server) -> None:
    agent = await server.key()
    first = await acquire(agent)
    error = {"error": "mailbox does not exist"}
    failed = await complete(agent, first.key, first.json["lease_token"], "failed_terminal", error)
    assert failed.status == 200
    again = await acquire(agent)
    assert again.status == 200
    assert again.replayed
    assert again.json == {"key": first.key, "state": "failed_terminal", "result": error}


async def test_a_retryable_failure_frees_the_key(server: Server) -> None:
    agent = await server.key()
    first = await acquire(agent)
    old = first.json["lease_token"]
    freed = await complete(agent, first.key, old, "failed_retryable", {"error": "timeout"})
    assert freed.status == 200
    assert freed.json["state"] == "failed_retryable"
    assert ledger_rows(server) == []
    assert (await agent.get(f"/v1/executions/{first.key}")).status == 404

    second = await acquire(agent)
    assert second.status == 201
    assert not second.replayed
    assert second.key == first.key
    assert second.json["lease_token"] != old
    stale = await complete(agent, first.key, old)
    assert stale.status == 409  # the record is back, under the new lease
    assert stale.json["code"] == "lease_lost"


async def test_an_expired_lease_is_taken_over_and_the_old_token_fenced(server: Server) -> None:
    agent, other = await server.key(), await server.key(agent="agent-b")
    first = await acquire(agent, call(lease_seconds=5))
    server.clock.advance(6)
    takeover = await acquire(other)
    assert takeover.status == 201
    assert not takeover.replayed
    new = takeover.json["lease_token"]
    assert new != first.json["lease_token"]
    assert takeover.json["lease_expires_at"] == "2030-10-01T09:00:36Z"

    late = await complete(agent, first.key, first.json["lease_token"], result="late")
    assert late.status == 409
    assert late.json["code"] == "lease_lost"
    assert ledger_rows(server) == [(first.key, "executing", new)]  # the refusal wrote nothing

    done = await complete(other, first.key, new, result="sent")
    assert done.status == 200
    assert done.json["result"] == "sent"
    read = await agent.get(f"/v1/executions/{first.key}")
    assert read.json["agent_id"] == "agent-b"


async def test_a_completion_after_expiry_but_before_takeover_counts(server: Server) -> None:
    agent = await server.key()
    first = await acquire(agent, call(lease_seconds=1))
    server.clock.advance(120)
    done = await complete(agent, first.key, first.json["lease_token"], result=[1, 2])
    assert done.status == 200
    assert done.json["state"] == "succeeded"
    again = await acquire(agent)
    assert again.status == 200
    assert again.replayed
    assert again.json["result"] == [1, 2]


async def test_a_repeated_completion_is_a_replay_and_a_different_one_refused(
    server: Server,
) -> None:
    agent = await server.key()
    first = await acquire(agent)
    token = first.json["lease_token"]
    done = await complete(agent, first.key, token, result={"b": 1, "a": [1, 2]})
    again = await complete(agent, first.key, token, result={"a": [1, 2], "b": 1})
    assert again.status == 200
    assert again.replayed
    assert again.body == done.body
    other = await complete(agent, first.key, token, result={"a": [2, 1], "b": 1})
    assert other.status == 409
    assert other.json["code"] == "completion_mismatch"
    other = await complete(agent, first.key, token, "failed_terminal", {"b": 1, "a": [1, 2]})
    assert other.status == 409
    assert other.json["code"] == "completion_mismatch"


async def test_a_made_up_token_cannot_complete(server: Server) -> None:
    agent = await server.key()
    first = await acquire(agent)
    before = server.table_counts()
    forged = await complete(agent, first.key, "lease_0000000000000000000000000000")
    assert forged.status == 409
    assert forged.json["code"] == "lease_lost"
    assert server.table_counts() == before
    assert ledger_rows(server) == [(first.key, "executing", first.json["lease_token"])]


async def test_keys_follow_canonical_json(server: Server) -> None:
    agent = await server.key()
    base = await acquire(agent)
    args = CALL["arguments"]
    shuffled = {"body": "...", "subject": "Hi", "to": ["ana@example.com", "bo@example.com"]}
    assert list(shuffled) != list(args)
    same = await acquire(agent, call(arguments=shuffled, reasoning="the user asked"))
    assert same.status == 409
    assert same.key == base.key

    reordered = {**args, "to": ["bo@example.com", "ana@example.com"]}
    other = await acquire(agent, call(arguments=reordered))
    assert other.status == 201
    assert other.key != base.key

    thought = await acquire(agent, call(arguments={**args, "agent_thought": "hmm"}))
    assert thought.status == 409
    assert thought.key == base.key

    for changed in (call(step=2), call(workflow_id="wf-other"), call(tool="send_sms")):
        answer = await acquire(agent, changed)
        assert answer.status == 201
        assert answer.key != base.key


async def test_a_client_key_replaces_the_derived_one(server: Server) -> None:
    agent = await server.key()
    body = {"tool": "refund", "arguments": {"order": "o-1", "cents": 1250}}
    first = await acquire(agent, body, headers={"Idempotency-Key": "refund-o-1"})
    assert first.status == 201
    assert first.key == "refund-o-1"
    done = await complete(agent, "refund-o-1", first.json["lease_token"], result={"ok": True})
    assert done.status == 200
    assert done.json["key"] == "refund-o-1"
    again = await acquire(agent, body, headers={"Idempotency-Key": "refund-o-1"})
    assert again.status == 200
    assert again.replayed
    assert again.body == done.body

    before = server.table_counts()
    other = {"tool": "refund", "arguments": {"order": "o-1", "cents": 99999}}
    reused = await acquire(agent, other, headers={"Idempotency-Key": "refund-o-1"})
    assert reused.status == 422
    assert reused.json["code"] == "idempotency_key_reused"
    assert server.table_counts() == before
    assert (await agent.get("/v1/executions/refund-o-1")).json["result"] == {"ok": True}


async def test_without_a_workflow_a_client_key_is_needed(server: Server) -> None:
    agent = await server.key()
    answer = await acquire(agent, {"tool": "refund", "arguments": {}})
    assert answer.status == 422
    assert answer.json["code"] == "missing_field"
    assert answer.json["field"] == "workflow_id"


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"lease_seconds": 0}, "lease_seconds"),
        ({"lease_seconds": 301}, "lease_seconds"),
        ({"wait_ms": 30001}, "wait_ms"),
        ({"arguments": ["not", "an", "object"]}, "arguments"),
        ({"step": "1"}, "step"),
        ({"tool": ""}, "tool"),
        ({"surprise": 1}, "surprise"),
    ],
)
async def test_bad_acquires_are_refused_and_write_nothing(
    server: Server, changes: dict[str, Any], field: str
) -> None:
    agent = await server.key()
    before = server.table_counts()
    answer = await acquire(agent, call(**changes))
    assert answer.status == 422, answer.body
    assert answer.json["field"] == field
    assert server.table_counts() == before


async def test_bad_completions_are_refused(server: Server) -> None:
    agent = await server.key()
    first = await acquire(agent)
    token = first.json["lease_token"]
    path = f"/v1/executions/{first.key}/complete"
    bad = await agent.post(path, {"lease_token": token, "outcome": "done"})
    assert bad.status == 422
    assert bad.json["field"] == "outcome"
    bad = await agent.post(path, {"outcome": "succeeded"})
    assert bad.status == 422
    assert bad.json["field"] == "lease_token"
    assert ledger_rows(server) == [(first.key, "executing", token)]


async def test_a_hold_key_reads_as_a_record_but_cannot_be_completed(
    server: Server, hold_body: dict[str, Any]
) -> None:
    agent = await server.key()
    hold = await agent.create(hold_body)
    read = await agent.get(f"/v1/executions/{hold.key}")
    assert read.status == 200
    assert read.json["kind"] == "hold"
    assert read.json["state"] == "succeeded"
    assert read.json["tool"] == "create_calendar_hold"
    assert read.json["result"] == hold.json
    answer = await complete(agent, str(hold.key), "lease_x")
    assert answer.status == 404
    assert answer.json["code"] == "execution_not_found"


async def test_executions_belong_to_their_tenant(server: Server) -> None:
    agent, stranger = await server.key(), await server.key(tenant="globex")
    first = await acquire(agent)
    assert (await stranger.get(f"/v1/executions/{first.key}")).status == 404
    stolen = await complete(stranger, first.key, first.json["lease_token"])
    assert stolen.status == 404  # even with the right token: not this tenant's
    assert stolen.json["code"] == "execution_not_found"
    mine = await acquire(stranger)  # the same call in another tenant is another key
    assert mine.status == 201
    assert mine.key != first.key


async def test_only_writers_acquire_and_complete(server: Server) -> None:
    agent, reviewer = await server.key(), await server.key(agent="rev", role="reviewer")
    first = await acquire(agent)
    assert (await acquire(reviewer)).status == 403
    assert (await complete(reviewer, first.key, first.json["lease_token"])).status == 403
    assert (await reviewer.get(f"/v1/executions/{first.key}")).status == 200


async def test_fifty_concurrent_acquires_give_one_lease(server: Server) -> None:
    agents = [await server.key(agent=f"agent-{i % 5}") for i in range(5)]
    answers = await asyncio.gather(*(acquire(agents[i % 5]) for i in range(50)))
    statuses = sorted(a.status for a in answers)
    assert statuses == [201] + [409] * 49
    assert {a.key for a in answers} == {answers[0].key}
    assert all(a.json["code"] == "request_in_progress" for a in answers if a.status == 409)
    winner = next(a for a in answers if a.status == 201)
    rows = ledger_rows(server)
    assert rows == [(winner.key, "executing", winner.json["lease_token"])]
    acquires = server.sql("SELECT outcome FROM audit_log WHERE action = 'execution.acquire'")
    assert acquires == [("fresh",)]


async def _a_waiter_gets_what_lands(server: Server, waiter: Client, holder: Client) -> None:
    """``holder`` acquires and completes while ``waiter`` (on ``server``) waits for it."""
    first = await acquire(holder)
    waiting = asyncio.create_task(acquire(waiter, call(wait_ms=20000)))
    await until(lambda: len(server.services.completions) == 1)
    done = await complete(holder, first.key, first.json["lease_token"], result="sent")
    answer = await waiting
    assert answer.status == 200
    assert answer.replayed
    assert answer.body == done.body
    assert len(server.services.completions) == 0  # nothing left behind


async def test_wait_ms_returns_the_result_that_lands_meanwhile(server: Server) -> None:
    agent = await server.key()
    await _a_waiter_gets_what_lands(server, agent, agent)


async def test_wait_ms_ends_with_the_lease_when_the_holder_frees_it(server: Server) -> None:
    agent = await server.key()
    first = await acquire(agent)
    waiting = asyncio.create_task(acquire(agent, call(wait_ms=20000)))
    await until(lambda: len(server.services.completions) == 1)
    await complete(agent, first.key, first.json["lease_token"], "failed_retryable")
    answer = await waiting
    assert answer.status == 201
    assert answer.json["state"] == "acquired"
    assert answer.json["lease_token"] != first.json["lease_token"]


async def test_wait_ms_gives_up_with_in_progress(server: Server) -> None:
    agent = await server.key()
    await acquire(agent)
    answer = await acquire(agent, call(wait_ms=250))
    assert answer.status == 409
    assert answer.json["code"] == "request_in_progress"
    assert len(server.services.completions) == 0


@pytest.fixture
def config_overrides() -> dict[str, Any]:
    return {"retention_hours": 1}


async def test_records_are_purged_after_retention(server: Server) -> None:
    agent = await server.key()
    first = await acquire(agent)
    server.clock.advance(60)
    await complete(agent, first.key, first.json["lease_token"], result="sent")
    server.clock.advance(10)
    kept = await acquire(agent, call(step=2))  # never completed: abandoned
    server.clock.advance(3600 - 10 - 1)  # retention runs from the completion
    await server.sweep()
    assert [r[0] for r in ledger_rows(server)] == sorted([str(first.key), str(kept.key)])
    server.clock.advance(1)
    await server.sweep()
    assert [r[0] for r in ledger_rows(server)] == [kept.key]
    again = await acquire(agent)
    assert again.status == 201
    assert not again.replayed
    server.clock.advance(10)
    await server.sweep()
    assert [r[0] for r in ledger_rows(server)] == [again.key]


async def test_wait_ms_sees_a_completion_made_by_another_process(
    server: Server, database: tuple[str, Any]
) -> None:
    """A second app on the same database: on PostgreSQL its NOTIFY wakes the waiter here;
    on SQLite nothing signals across processes and the fallback poll (1 s) finds it."""
    url, _ = database
    config = Config(db_url=url)
    other = await bootstrap(config, clock=server.clock)
    async with serving(build_app(other, config, sweep=False)) as other_base:
        agent = await server.key()
        there = Client(server.session, other_base, agent.secret)
        await _a_waiter_gets_what_lands(server, agent, there)


async def test_a_hold_past_retention_is_not_booked_twice(
    server: Server, hold_body: dict[str, Any]
) -> None:
    agent = await server.key()
    hold = await agent.create(hold_body)
    await agent.commit(hold.json["id"], hold.json["token"])
    server.clock.advance(3600)
    await server.sweep()
    assert server.sql("SELECT count(*) FROM ledger") == [(0,)]
    again = await agent.create(hold_body)
    assert again.status == 409
    assert again.json["code"] == "slot_conflict"
    assert again.json["conflicts"][0]["same_intent"] is True
    assert server.sql("SELECT count(*) FROM holds") == [(1,)]


async def test_the_workflow_view_lists_its_executions(server: Server) -> None:
    agent = await server.key()
    first = await acquire(agent)
    await complete(agent, first.key, first.json["lease_token"], result={"id": "m-1"})
    server.clock.advance(5)
    running = await acquire(agent, call(step=2))
    view = await agent.get("/v1/workflows/wf-mail")
    assert view.status == 200
    executions = view.json["executions"]
    assert [(e["key"], e["state"]) for e in executions] == [
        (first.key, "succeeded"),
        (running.key, "executing"),
    ]
    assert executions[0]["result"] == {"id": "m-1"}
    assert "result" not in executions[1]
    assert view.json["last_activity_at"] == "2030-10-01T09:00:05Z"  # the second acquire


async def test_ledger_outcomes_are_counted(server: Server) -> None:
    agent = await server.key()
    first = await acquire(agent)  # fresh
    await acquire(agent)  # in_progress
    server.clock.advance(31)
    taken = await acquire(agent)  # takeover
    await complete(agent, first.key, first.json["lease_token"])  # fencing_rejected
    await complete(agent, taken.key, taken.json["lease_token"], result="ok")  # not counted
    await acquire(agent)  # replayed
    other = call(arguments={"x": 1})
    await acquire(agent, other, headers={"Idempotency-Key": "k-1"})  # fresh
    await acquire(agent, call(), headers={"Idempotency-Key": "k-1"})  # mismatch
    metrics = await read_metrics(server)
    counted = {
        outcome: sample(metrics, "slotward_idempotency_total", outcome=outcome)
        for outcome in ("fresh", "replayed", "in_progress", "mismatch", "takeover",
                        "fencing_rejected")
    }  # fmt: skip
    assert counted == {
        "fresh": 2, "replayed": 1, "in_progress": 1, "mismatch": 1, "takeover": 1,
        "fencing_rejected": 1,
    }  # fmt: skip
    assert sample(metrics, "slotward_ledger_executing") == 1  # k-1 still runs
    server.clock.advance(31)  # its lease runs out: abandoned, not in flight
    assert sample(await read_metrics(server), "slotward_ledger_executing") == 0
    assert [r[1] for r in ledger_rows(server)].count("executing") == 1


@pytest.mark.parametrize("client_key", ["orders/o-1", "100% done", "a b", "x?y#z"])
async def test_client_keys_travel_percent_encoded_in_paths(server: Server, client_key: str) -> None:
    agent = await server.key()
    body = {"tool": "refund", "arguments": {}}
    first = await acquire(agent, body, headers={"Idempotency-Key": client_key})
    assert first.key == client_key
    path = "/v1/executions/" + quote(client_key, safe="")
    assert (await agent.get(path)).json["key"] == client_key
    done = await agent.post(path + "/complete", {"lease_token": first.json["lease_token"],
                                                 "outcome": "succeeded"})  # fmt: skip
    assert done.status == 200
    assert done.json == {"key": client_key, "state": "succeeded", "result": None}


async def test_sending_back_the_derived_key_is_the_same_call(server: Server) -> None:
    agent = await server.key()
    first = await acquire(agent)
    echoed = await acquire(agent, headers={"Idempotency-Key": str(first.key)})
    assert echoed.status == 409  # the same record, its lease still running
    assert echoed.key == first.key
    done = await complete(agent, first.key, first.json["lease_token"], result="sent")
    again = await acquire(agent, headers={"Idempotency-Key": str(first.key)})
    assert again.status == 200
    assert again.body == done.body
    assert len(ledger_rows(server)) == 1


async def test_a_key_of_the_derived_form_for_another_call_is_refused(server: Server) -> None:
    agent = await server.key()
    first = await acquire(agent)
    before = server.table_counts()
    other = await acquire(agent, call(step=9), headers={"Idempotency-Key": str(first.key)})
    assert other.status == 422
    assert other.json["code"] == "idempotency_key_reused"  # that key names another call
    made_up = "idem_" + "0" * 64
    hold = await agent.create(
        {**json.loads(json.dumps(CALL_HOLD))}, headers={"Idempotency-Key": made_up}
    )
    assert hold.status == 422
    assert hold.json["code"] == "invalid_idempotency_key"  # no call derives it: never claimed
    assert server.table_counts() == before


async def test_the_key_of_a_step_drift_replay_can_be_sent_back(server: Server) -> None:
    agent = await server.key()
    first = await agent.create({**CALL_HOLD, "step": 3})
    drifted = await agent.create({**CALL_HOLD, "step": 7})
    assert drifted.replayed
    assert drifted.key == first.key
    echoed = await agent.create(
        {**CALL_HOLD, "step": 7}, headers={"Idempotency-Key": str(first.key)}
    )
    assert echoed.status == 201
    assert echoed.replayed
    assert echoed.body == first.body
    assert server.sql("SELECT count(*) FROM holds") == [(1,)]


CALL_HOLD: dict[str, Any] = {
    "workflow_id": "wf-h", "attendees": ["a@example.com"], "start": "2030-10-14T14:00:00Z",
    "duration_minutes": 30,
}  # fmt: skip


@pytest.mark.parametrize("raw", ["abc%0D%0AX-Evil:%201", "%C3%A9t%C3%A9", "a" * 300])
async def test_a_path_key_that_cannot_be_a_key_is_404(server: Server, raw: str) -> None:
    agent = await server.key()
    done = await agent.post(f"/v1/executions/{raw}/complete",
                            {"lease_token": "lease_x", "outcome": "succeeded"})  # fmt: skip
    assert done.status == 404
    assert done.json["code"] == "execution_not_found"
    assert "Idempotency-Key" not in done.headers  # nothing of the path is echoed in a header
    assert (await agent.get(f"/v1/executions/{raw}")).status == 404


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/executions", {"workflow_id": "wf\u0000", "tool": "t", "arguments": {}}),
        ("/v1/executions", {"workflow_id": "wf", "tool": "t\u0000", "arguments": {}}),
        ("/v1/holds", {**CALL_HOLD, "workflow_id": "wf\u0000"}),
        ("/v1/holds", {**CALL_HOLD, "title": "a\u0000b"}),
    ],
)
async def test_nul_characters_are_refused_not_stored(
    server: Server, path: str, body: dict[str, Any]
) -> None:
    agent = await server.key()
    before = server.table_counts()
    answer = await agent.post(path, body)
    assert answer.status == 422
    assert answer.json["code"] == "invalid_field"
    assert server.table_counts() == before


@pytest.mark.parametrize(
    "path",
    ["/v1/workflows/wf%00", "/v1/holds/h%00", "/v1/holds?workflow_id=a%00", "/v1/executions/k%00"],
)
async def test_nul_characters_in_paths_and_queries_are_refused(server: Server, path: str) -> None:
    agent = await server.key()
    answer = await agent.get(path)
    assert answer.status == 422
    assert answer.json["code"] == "invalid_field"


def _a_handler_pauses() -> bool:
    """Whether some task of this loop is inside api/ledger.py's ``pause_until``."""
    for task in asyncio.all_tasks():
        awaited: Any = task.get_coro()
        while awaited is not None:
            code = getattr(awaited, "cr_code", None)
            if code is not None and code.co_name == pause_until.__name__:
                return True
            awaited = getattr(awaited, "cr_await", None)
    return False


async def test_a_waiter_whose_client_left_takes_nothing_over(server: Server) -> None:
    agent = await server.key()
    first = await acquire(agent)
    waiting = asyncio.create_task(acquire(agent, call(wait_ms=20000)))
    # Paused in its wait, not merely listening: the handler listens before its
    # first look, and a lease that ran out before that look is taken over by the
    # look itself (a run under load once did so).
    await until(_a_handler_pauses)
    waiting.cancel()  # the client gives up: its connection closes
    with pytest.raises(asyncio.CancelledError):
        await waiting
    server.clock.advance(31)  # the lease runs out while the handler still waits

    async def waiter_answered() -> float:
        metrics = await read_metrics(server)
        return sum(
            v for (name, labels), v in metrics.items()
            if name == "slotward_http_requests_total" and ("route", "/v1/executions") in labels
        )  # fmt: skip

    for _ in range(400):  # bounded: the handler looks at its connection every 0.5 s
        if await waiter_answered() == 2:
            break
        await asyncio.sleep(0.01)
    metrics = await read_metrics(server)
    assert sample(metrics, "slotward_http_requests_total", route="/v1/executions",
                  method="POST", status="409") == 1  # fmt: skip
    assert ledger_rows(server) == [(first.key, "executing", first.json["lease_token"])]
    takeovers = server.sql("SELECT count(*) FROM audit_log WHERE outcome = 'takeover'")
    assert takeovers == [(0,)]
