"""Use cases of the generic ledger: run any agent tool call at most once.

DESIGN section 4. A caller acquires a key (derived from the call, or its own
``Idempotency-Key``) and gets a lease with a fencing token; it runs the tool
and reports the outcome with that token. Duplicates meanwhile get
``request_in_progress`` (or wait, in the API), and afterwards the stored
completion, replayed. An expired lease is taken over by the next duplicate with
a new token, after which the old token is refused (``lease_lost``).

The derived key covers ``{"arguments": ...}``, not the bare arguments, so no
execution can ever derive the key of a hold tool's call.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, Literal

from slotward.engine.errors import (
    Conflict,
    InProgress,
    LeaseLost,
    NotFound,
    SlotwardError,
    ValidationFailed,
    answering_for,
)
from slotward.engine.model import LedgerRecord, Principal, Reply
from slotward.engine.ports import Clock, IdGenerator, UnitOfWork
from slotward.engine.rules.documents import encode, execution_document
from slotward.engine.rules.fingerprint import (
    CLIENT_PREFIX,
    canonical_json,
    check_claimable,
    check_client_key,
    derive_key,
    is_derived_key,
    ledger_key,
    public_key,
)
from slotward.engine.rules.policy import Policy
from slotward.engine.rules.timenorm import format_instant
from slotward.engine.usecases.effects import audit

__all__ = [
    "Completion",
    "ExecutionRequest",
    "Outcome",
    "acquire",
    "complete",
    "find_record",
    "get_execution",
    "lookup_execution",
    "settled",
    "stored_key",
]

Outcome = Literal["succeeded", "failed_terminal", "failed_retryable"]


@dataclass(frozen=True)
class ExecutionRequest:
    """A validated acquire: ``arguments`` are free of thought fields already."""

    principal: Principal
    workflow_id: str | None
    step: int | None
    tool: str
    arguments: Mapping[str, Any]
    lease_seconds: int
    client_key: str | None = None

    def keys(self) -> tuple[str, str]:
        """``(stored key, fingerprint)``: the derived key is the fingerprint."""
        derived = derive_key(
            tenant=self.principal.tenant,
            workflow=self.workflow_id,
            tool=self.tool,
            intent={"arguments": self.arguments},
            step=self.step,
        )
        return ledger_key(self.client_key, derived), derived


@dataclass(frozen=True)
class Completion:
    principal: Principal
    key: str  # as the client sees it
    lease_token: str
    outcome: Outcome
    result: Any


def stored_key(public: str) -> str | None:
    """The stored key a public key names, or None when it cannot be a key at all."""
    if is_derived_key(public):
        return public
    try:
        return CLIENT_PREFIX + check_client_key(public)
    except ValidationFailed:
        return None  # control characters, non-ASCII, too long: no record has it


def find_record(uow: UnitOfWork, tenant: str, public: str) -> LedgerRecord | None:
    key = stored_key(public)
    return None if key is None else uow.ledger.get(tenant, key)


def get_execution(uow: UnitOfWork, principal: Principal, key: str) -> dict[str, Any]:
    """The record under ``key`` (an execution's or a hold tool's), as a document."""
    with uow:
        record = find_record(uow, principal.tenant, key)
    if record is None:
        raise NotFound(f"no execution {key!r}", code="execution_not_found")
    return execution_document(record)


def lookup_execution(uow: UnitOfWork, req: ExecutionRequest, clock: Clock) -> Reply | None:
    """Read-only fast path: the stored completion, or InProgress while a live lease runs.

    ``None`` means a write is needed: no record yet, or an expired lease.
    """
    with uow:
        now = clock.now()
        key, fingerprint = req.keys()
        record = uow.ledger.get(req.principal.tenant, key)
        if record is None:
            return None
        return _duplicate(record, fingerprint, now)


def settled(
    uow: UnitOfWork, keys: Sequence[tuple[str, str]], clock: Clock
) -> list[tuple[str, str]]:
    """Which ``(tenant, stored key)`` no longer run a live lease: their waiters may look.

    Read-only, for the waiters' fallback (api/completions.py): one read for all.
    """
    with uow:
        now = clock.now()
        records = [(name, uow.ledger.get(*name)) for name in keys]
    return [
        name for name, record in records
        if record is None or record.state != "executing" or record.lease_expires_at is None
        or record.lease_expires_at <= now
    ]  # fmt: skip


def acquire(
    uow: UnitOfWork, req: ExecutionRequest, policy: Policy, clock: Clock, ids: IdGenerator
) -> Reply:
    """Take the lease on this call's key (a creation), or answer as a duplicate."""
    tenant = req.principal.tenant
    with uow:
        uow.lock_tenant(tenant)
        now = clock.now()  # after the lock: writers that waited for it see fresh time
        key, fingerprint = req.keys()
        record = uow.ledger.get(tenant, key)
        if record is not None:
            answer = _duplicate(record, fingerprint, now)
            if answer is not None:
                return answer
        token = ids.new_id("lease")
        lease_end = now + timedelta(seconds=req.lease_seconds)
        if record is None:
            check_claimable(key, fingerprint)
            # No answer is stored while executing: the completion's replaces it.
            record = LedgerRecord(
                tenant=tenant, key=key, fingerprint=fingerprint, state="executing",
                created=False, body=b"", created_at=now, expires_at=now + policy.retention,
                kind="execution", workflow_id=req.workflow_id, tool=req.tool,
                agent_id=req.principal.agent_id, lease_token=token, lease_expires_at=lease_end,
            )  # fmt: skip
            uow.ledger.add(record)
            outcome = "fresh"
        else:  # an expired lease: take it over, with a new fencing token
            record = replace(
                record, agent_id=req.principal.agent_id, lease_token=token,
                lease_expires_at=lease_end, expires_at=now + policy.retention,
            )  # fmt: skip
            uow.ledger.save(record)
            outcome = "takeover"
        audit(uow, tenant, req.principal.agent_id, now, "execution.acquire", key, None, outcome,
              audit_key=policy.audit_key)  # fmt: skip
        uow.commit()
    body = encode(
        {
            "key": public_key(key),
            "state": "acquired",
            "lease_token": token,
            "lease_expires_at": format_instant(lease_end),
        }
    )
    return Reply(
        created=True, body=body, key=public_key(key), replayed=False,
        workflow_id=req.workflow_id, takeover=outcome == "takeover",
    )  # fmt: skip


def _duplicate(record: LedgerRecord, fingerprint: str, now: datetime) -> Reply | None:
    """What a duplicate acquire gets: the stored completion, InProgress, or None (take over)."""
    if record.fingerprint != fingerprint:
        raise _tagged(
            ValidationFailed(
                "this Idempotency-Key was already used for a different request",
                code="idempotency_key_reused",
            ),
            record,
        )
    if record.state != "executing":
        return Reply(
            created=record.created, body=record.body, key=public_key(record.key),
            replayed=True, workflow_id=record.workflow_id,
        )  # fmt: skip
    lease_end = record.lease_expires_at
    if lease_end is None or lease_end <= now:
        return None
    wait = max(1, math.ceil((lease_end - now).total_seconds()))
    raise _tagged(
        InProgress(
            "another caller holds the lease on this call; retry after it, or pass wait_ms",
            retry_after=wait,
            extra={"lease_expires_at": format_instant(lease_end)},
        ),
        record,
    )


def _tagged(error: SlotwardError, record: LedgerRecord) -> SlotwardError:
    error.idempotency_key = public_key(record.key)
    return error


def complete(uow: UnitOfWork, done: Completion, policy: Policy, clock: Clock) -> Reply:
    """Record the outcome of a lease; fenced by the current lease token.

    A completion after the lease expired but before any takeover is accepted.
    Repeating a completion replays it; a different completion under the same
    token is refused (``completion_mismatch``), and so is any other token.
    """
    tenant = done.principal.tenant
    if stored_key(done.key) is None:
        raise NotFound(f"no execution {done.key!r}", code="execution_not_found")
    with uow, answering_for(done.key):
        uow.lock_tenant(tenant)
        now = clock.now()
        record = _completable(find_record(uow, tenant, done.key), done)
        body = encode({"key": public_key(record.key), "state": done.outcome, "result": done.result})
        if record.state != "executing":
            return _repeat(record, done)
        if done.outcome == "failed_retryable":
            uow.ledger.remove(tenant, record.key)
        else:
            uow.ledger.save(
                replace(
                    record, state=done.outcome, created=False, body=body, lease_expires_at=None,
                    completed_at=now, expires_at=now + policy.retention,
                )
            )  # fmt: skip
        agent = done.principal.agent_id
        audit(uow, tenant, agent, now, "execution.complete", record.key, None, done.outcome,
              audit_key=policy.audit_key)  # fmt: skip
        uow.commit()
    return Reply(
        created=False, body=body, key=public_key(record.key), replayed=False,
        workflow_id=record.workflow_id, completion=True,
    )  # fmt: skip


def _completable(record: LedgerRecord | None, done: Completion) -> LedgerRecord:
    """The record a completion may complete: NotFound without one, LeaseLost under another."""
    if record is None:
        raise NotFound(
            f"no execution {done.key!r}: never acquired (in this tenant), freed by a"
            " retryable failure, or past retention; this lease holds nothing",
            code="execution_not_found",
        )
    if record.kind != "execution":
        raise NotFound(
            f"{done.key!r} is a hold tool's key: holds complete through commit and release",
            code="execution_not_found",
        )
    if record.lease_token != done.lease_token:
        raise LeaseLost(
            "this lease token does not hold the key: the lease was taken over by another"
            " caller, or the token is not one slotward issued for it"
        )
    return record


def _repeat(record: LedgerRecord, done: Completion) -> Reply:
    stored = json.loads(record.body)
    same = stored["state"] == done.outcome and canonical_json([stored["result"]]) == canonical_json(
        [done.result]
    )
    if not same:
        raise Conflict(
            f"this lease already completed the call as {stored['state']!r} with another result;"
            " a completion is recorded once",
            code="completion_mismatch",
            extra={"state": stored["state"]},
        )
    return Reply(
        created=False, body=record.body, key=public_key(record.key), replayed=True,
        workflow_id=record.workflow_id,
    )  # fmt: skip
