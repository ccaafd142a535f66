"""Services of approvals: open, decide, read (with the long poll of ``wait``),
list, and the tenant's approval policy. Part of api/service.py, which
re-exports them; no aiohttp here.

A reader waiting for a decision is woken by the decision itself through
:class:`~slotward.api.completions.Completions` (the name of an approval's
wait is :func:`wait_name`), or by the process's fallback look
(:func:`settled_waits`), never by a poll of its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Mapping
from datetime import datetime, timedelta
from functools import partial
from typing import Any

from slotward.api.bootstrap import Services
from slotward.api.ledger import pause_until
from slotward.api.waits import wait_name
from slotward.engine.approvals import HOLD_COMMIT, ApprovalStatus
from slotward.engine.errors import ValidationFailed
from slotward.engine.model import Principal, Reply, Role
from slotward.engine.ports import Clock
from slotward.engine.rules import approvals as rules
from slotward.engine.rules.fingerprint import check_client_key, check_step
from slotward.engine.usecases import approval_policy, approvals

__all__ = [
    "MAX_WAIT_SECONDS",
    "REVIEWERS",
    "approval_policy_of",
    "decide_approval",
    "list_approvals",
    "put_approval_policy",
    "read_approval",
    "request_approval",
]

REVIEWERS: tuple[Role, ...] = ("reviewer", "admin")
MAX_WAIT_SECONDS = 60


async def request_approval(
    svc: Services, principal: Principal, fields: Mapping[str, Any], client_key: str | None
) -> Reply:
    """Open an approval (``fields`` as ``POST /v1/approvals`` takes them, shape-checked)."""
    key = None if client_key is None else check_client_key(client_key)
    action = rules.check_action(fields.get("action"))
    gated = action is not None and action["type"] == HOLD_COMMIT
    if fields.get("workflow_id") is None and key is None and not gated:
        raise ValidationFailed(
            "give 'workflow_id', or your own Idempotency-Key header",
            code="missing_field",
            extra={"field": "workflow_id"},
        )
    expires = fields.get("expires_in_seconds")
    req = approvals.ApprovalRequest(
        principal=principal,
        workflow_id=fields.get("workflow_id"),
        step=check_step(fields.get("step")),
        summary=rules.check_summary(fields["summary"]),
        evidence=rules.check_evidence(fields["evidence"]),
        action=action,
        expires_in=rules.DEFAULT_EXPIRY if expires is None else timedelta(seconds=expires),
        client_key=key,
    )
    reply = await svc.store.write(
        partial(approvals.request_approval, req=req, policy=svc.policy, clock=svc.clock,
                ids=svc.ids)
    )  # fmt: skip
    await svc.storms.observe(principal.tenant, reply.workflow_id, reply)
    return reply


async def decide_approval(
    svc: Services, principal: Principal, approval_id: str, fields: Mapping[str, Any]
) -> Reply:
    """Approve or deny; the approval's waiters, here and in other processes, wake."""
    decision = rules.Decision(
        fields["decision"], principal.agent_id, rules.check_note(fields.get("note"))
    )
    req = approvals.DecisionRequest(principal, approval_id, decision)
    reply = await svc.store.write(
        partial(approvals.decide_approval, req=req, policy=svc.policy, clock=svc.clock,
                ids=svc.ids)
    )  # fmt: skip
    if not reply.replayed:
        svc.completions.notify(principal.tenant, wait_name(approval_id))
    return reply


async def read_approval(
    svc: Services,
    principal: Principal,
    approval_id: str,
    wait: float = 0,
    gone: Callable[[], bool] = lambda: False,
) -> dict[str, Any]:
    """The approval; with ``wait`` (seconds), once it is no longer pending or the
    time is up, whichever comes first (or the client has gone)."""

    async def look() -> tuple[dict[str, Any], bool]:  # by its primary key: a peek
        return await svc.peek(
            partial(approvals.get_approval, principal=principal, approval_id=approval_id,
                    now=svc.clock.now())
        )  # fmt: skip

    if wait <= 0:
        return (await look())[0]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + min(wait, MAX_WAIT_SECONDS)
    with svc.completions.listen(principal.tenant, wait_name(approval_id)) as waiter:
        while True:
            waiter.clear()  # before the look: a decision after it still wakes us
            doc, pending = await look()
            until = min(deadline, loop.time() + _until_expiry(doc, svc.clock))
            if not pending or until <= loop.time() or gone():
                return doc
            await pause_until(waiter, until, gone)


def _until_expiry(doc: Mapping[str, Any], clock: Clock) -> float:
    """Seconds until the approval expires (it then reads expired: the wait ends)."""
    end = datetime.fromisoformat(doc["expires_at"])
    return max((end - clock.now()).total_seconds(), 0.0)


async def list_approvals(
    svc: Services,
    principal: Principal,
    *,
    statuses: Collection[ApprovalStatus] | None,
    cursor: str | None,
    limit: int,
) -> dict[str, Any]:
    now = svc.clock.now()
    return await svc.store.read(
        partial(approvals.list_approvals, principal=principal,
                statuses=None if statuses is None else list(statuses), cursor=cursor,
                limit=limit, now=now)
    )  # fmt: skip


async def put_approval_policy(
    svc: Services, principal: Principal, require: Mapping[str, Any]
) -> dict[str, Any]:
    return await svc.store.write(
        partial(approval_policy.put_policy, principal=principal, require=require,
                policy=svc.policy, clock=svc.clock)
    )  # fmt: skip


async def approval_policy_of(svc: Services, principal: Principal) -> dict[str, Any]:
    return await svc.store.read(partial(approval_policy.get_policy, principal=principal))
