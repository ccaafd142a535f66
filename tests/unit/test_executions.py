"""The generic ledger's use cases on the in-memory fakes, with a stepping clock."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from slotward.engine.clock import FixedClock
from slotward.engine.errors import InProgress, LeaseLost, ValidationFailed
from slotward.engine.fakes import InMemoryUnitOfWork, SequentialIds, State
from slotward.engine.model import Principal, Reply
from slotward.engine.rules.audit import verify_chain
from slotward.engine.rules.fingerprint import derive_key
from slotward.engine.rules.policy import Policy
from slotward.engine.usecases.executions import (
    Completion,
    ExecutionRequest,
    Outcome,
    acquire,
    complete,
    lookup_execution,
)
from slotward.engine.usecases.retention import purge_expired

T0 = datetime(2030, 10, 1, 9, 0, tzinfo=UTC)
AGENT = Principal("acme", "agent-a", "agent", 50)


class Ledger:
    def __init__(self, retention: timedelta = timedelta(hours=72)) -> None:
        self.state = State()
        self.clock = FixedClock(T0)
        self.ids = SequentialIds()
        self.policy = Policy(retention=retention)

    def acquire(self, req: ExecutionRequest | None = None) -> Reply:
        req = req or request()
        return acquire(InMemoryUnitOfWork(self.state), req, self.policy, self.clock, self.ids)

    def complete(
        self, key: str, token: str, outcome: Outcome = "succeeded", result: Any = 1
    ) -> Reply:
        done = Completion(AGENT, key, token, outcome, result)
        return complete(InMemoryUnitOfWork(self.state), done, self.policy, self.clock)

    def purge(self) -> int:
        return purge_expired(InMemoryUnitOfWork(self.state), self.clock)

    def states(self) -> list[str]:
        return [r.state for r in self.state.ledger.values()]


def request(lease: int = 30, **arguments: Any) -> ExecutionRequest:
    return ExecutionRequest(AGENT, "wf-1", None, "send_email", arguments or {"to": "a"}, lease)


def token(reply: Reply) -> str:
    return str(json.loads(reply.body)["lease_token"])


def test_the_key_is_derived_over_the_arguments_in_a_wrapper() -> None:
    key, fingerprint = request(to="a").keys()
    assert key == fingerprint
    bare = derive_key(
        tenant="acme", workflow="wf-1", tool="send_email", intent={"to": "a"}, step=None
    )
    assert key != bare  # no execution can derive a hold tool's key
    wrapped = {"arguments": {"to": "a"}}
    assert key == derive_key(
        tenant="acme", workflow="wf-1", tool="send_email", intent=wrapped, step=None
    )


def test_every_transition_in_order() -> None:
    ledger = Ledger()
    first = ledger.acquire()
    assert (first.created, first.outcome) == (True, "fresh")
    with pytest.raises(InProgress) as busy:
        ledger.acquire()
    assert busy.value.retry_after == 30

    ledger.clock.advance(31)
    taken = ledger.acquire()
    assert (taken.created, taken.outcome) == (True, "takeover")
    with pytest.raises(LeaseLost):
        ledger.complete(first.key, token(first))

    done = ledger.complete(taken.key, token(taken), result={"id": 7})
    assert (done.created, done.replayed) == (False, False)
    again = ledger.acquire()
    assert again.replayed
    assert again.body == done.body
    assert ledger.complete(taken.key, token(taken), result={"id": 7}).replayed
    assert ledger.states() == ["succeeded"]

    actions = [(e.action, e.outcome) for e in ledger.state.audit["acme"]]
    assert actions == [
        ("execution.acquire", "fresh"),
        ("execution.acquire", "takeover"),
        ("execution.complete", "succeeded"),
    ]
    assert verify_chain(ledger.state.audit["acme"]).ok


def test_a_retryable_failure_leaves_no_record() -> None:
    ledger = Ledger()
    first = ledger.acquire()
    ledger.complete(first.key, token(first), "failed_retryable")
    assert ledger.state.ledger == {}
    assert lookup_execution(InMemoryUnitOfWork(ledger.state), request(), ledger.clock) is None


def test_a_reused_client_key_is_refused() -> None:
    ledger = Ledger()
    mine = ExecutionRequest(AGENT, None, None, "refund", {"cents": 1}, 30, client_key="k")
    ledger.acquire(mine)
    other = ExecutionRequest(AGENT, None, None, "refund", {"cents": 2}, 30, client_key="k")
    with pytest.raises(ValidationFailed) as reused:
        ledger.acquire(other)
    assert reused.value.code == "idempotency_key_reused"
    assert reused.value.idempotency_key == "k"


def test_retention_purges_completed_and_abandoned_records_but_not_live_leases() -> None:
    ledger = Ledger(retention=timedelta(seconds=60))
    done = ledger.acquire(request(to="done"))
    ledger.complete(done.key, token(done))
    live = ledger.acquire(request(lease=300, to="live"))
    abandoned = ledger.acquire(request(lease=10, to="abandoned"))
    ledger.clock.advance(59)
    assert ledger.purge() == 0
    ledger.clock.advance(1)
    assert ledger.purge() == 2  # retention is over for all three; one lease still runs
    assert [r.key for r in ledger.state.ledger.values()] == [live.key]
    assert abandoned.key not in {r.key for r in ledger.state.ledger.values()}
    ledger.clock.advance(240)
    assert ledger.purge() == 1
