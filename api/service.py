"""Application services: the one way from an entrypoint into the use cases.

The HTTP handlers (api/http), the CLI (api/cli) and MCP decode their input,
call one function here and encode what it returns; the rules between a call
and the engine live here, not in them: the priority cap, tool dispatch and
argument aliases; the holds' services (api/holds.py), the workflow-or-own-key
rule and the long poll (api/ledger.py), approvals and their long poll
(api/approvals.py), key management (api/keys.py), the audit chain
(api/auditing.py) are re-exported here.
Nothing here imports aiohttp (tests/test_service_layer.py checks).
Client keys arrive raw (``Idempotency-Key`` as sent) and are checked here.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Hashable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from slotward.api.approvals import (
    MAX_WAIT_SECONDS,
    REVIEWERS,
    approval_policy_of,
    decide_approval,
    list_approvals,
    put_approval_policy,
    read_approval,
    request_approval,
)
from slotward.api.auditing import (
    audited_tenants,
    checkpoint_audit,
    gauges,
    list_audit,
    seal_audit,
    verify_chain,
    verify_tenant_audit,
)
from slotward.api.bootstrap import Services
from slotward.api.dashboard import audit_feed, audit_head, busiest_workflows, timeline
from slotward.api.holds import (
    commit,
    create_hold,
    find_slots,
    get_hold,
    list_holds,
    release,
    replay_known_create,
)
from slotward.api.keys import ROLES, NewKey, create_key, issue_key, revoke_key, withdraw_key
from slotward.api.ledger import acquire_execution, complete_execution, get_execution
from slotward.api.replays import tool_call_sent_as
from slotward.engine.errors import Forbidden, ValidationFailed
from slotward.engine.model import Principal, Reply, Role
from slotward.engine.tools import (
    COMMIT_HOLD,
    CREATE_HOLD,
    FIND_FREE_SLOTS,
    RELEASE_HOLD,
    tool_named,
)
from slotward.engine.usecases import directory, workflows

__all__ = [
    "ADMINS",
    "MAX_WAIT_SECONDS",
    "REVIEWERS",
    "ROLES",
    "RUNNERS",
    "WRITERS",
    "NewKey",
    "acquire_execution",
    "approval_policy_of",
    "audit_feed",
    "audit_head",
    "audited_tenants",
    "busiest_workflows",
    "call_tool",
    "checkpoint_audit",
    "commit",
    "complete_execution",
    "create_hold",
    "create_key",
    "decide_approval",
    "find_slots",
    "gauges",
    "get_execution",
    "get_hold",
    "issue_key",
    "list_approvals",
    "list_audit",
    "list_holds",
    "put_approval_policy",
    "put_attendee",
    "read_approval",
    "release",
    "replay_known_create",
    "request_approval",
    "require_role",
    "revoke_key",
    "seal_audit",
    "timeline",
    "verify_chain",
    "verify_tenant_audit",
    "withdraw_key",
    "workflow",
]

WRITERS: tuple[Role, ...] = ("agent", "admin")
ADMINS: tuple[Role, ...] = ("admin",)


def require_role(principal: Principal, roles: Collection[Role]) -> None:
    if principal.role not in roles:
        raise Forbidden(
            f"the {principal.role} role may not do this (needs {' or '.join(roles)})",
            code="role_forbidden",
        )


# -- the tool-call envelope -----------------------------------------------------


@dataclass(frozen=True, slots=True)
class _ToolRun:
    """One tool call as its runner takes it."""

    svc: Services
    p: Principal
    env: Mapping[str, Any]  # the envelope: tool, workflow_id, step
    args: dict[str, Any]  # the tool's canonical arguments
    key: str | None  # the client's Idempotency-Key
    body: Hashable | None  # the body's name as sent (api/replays.py tool_body_sent_as)


_Runner = Callable[[_ToolRun], Awaitable[Reply | dict[str, Any]]]


async def _run_create(run: _ToolRun) -> Reply:
    """A retry of a create call sent as it was (no client key) is replayed from
    what this process knows of it, as ``POST /v1/holds``'s (api/replays.py); a new
    hold is remembered under ``run.body`` too, when the caller names its body."""
    svc, p, key = run.svc, run.p, run.key
    workflow_id, step = run.env["workflow_id"], run.env.get("step")
    sent = None if key is not None else tool_call_sent_as(p, workflow_id, step, run.args)
    if sent is not None and (known := await replay_known_create(svc, p, sent)):
        return known
    return await create_hold(
        svc, p, run.args, workflow_id=workflow_id, step=step, client_key=key, sent=sent,
        also_sent=run.body,
    )  # fmt: skip


async def _run_commit(run: _ToolRun) -> Reply:
    return await commit(run.svc, run.p, run.args["hold_id"], run.args["token"], run.key)


async def _run_release(run: _ToolRun) -> Reply:
    return await release(run.svc, run.p, run.args["hold_id"], run.key)


async def _run_slots(run: _ToolRun) -> dict[str, Any]:
    return await find_slots(run.svc, run.p, run.args["attendees"], run.args)  # reads: no key


# How each tool of the registry runs; tests/test_tool_registry.py checks it
# covers every one.
RUNNERS: Mapping[str, _Runner] = {
    CREATE_HOLD.name: _run_create,
    COMMIT_HOLD.name: _run_commit,
    RELEASE_HOLD.name: _run_release,
    FIND_FREE_SLOTS.name: _run_slots,
}


async def call_tool(
    svc: Services,
    principal: Principal,
    envelope: Mapping[str, Any],
    client_key: str | None,
    body: Hashable | None = None,
) -> Reply | dict[str, Any]:
    """Run a tool call as an LLM emits it (``tool``, ``arguments``, ``workflow_id``, ``step``).

    A write answers a :class:`Reply` (as its own endpoint does), a read a document.
    ``body``: the call's body as sent (api/replays.py tool_body_sent_as), named by
    a caller whose answer is the call's own; a new hold is remembered under it.
    """
    tool = tool_named(envelope["tool"])
    if not tool.read_only:
        require_role(principal, WRITERS)
    if tool.needs_workflow and "workflow_id" not in envelope:
        raise ValidationFailed(
            f"{tool.name} needs the envelope's 'workflow_id'",
            code="missing_field",
            extra={"field": "workflow_id"},
        )
    given = tool.arguments.validate(envelope["arguments"], ignore=svc.policy.thought_fields)
    run = _ToolRun(svc, principal, envelope, tool.canonical(given), client_key, body)
    return await RUNNERS[tool.name](run)


# -- workflows, the directory, the audit chain ----------------------------------------


async def workflow(svc: Services, principal: Principal, workflow_id: str) -> dict[str, Any]:
    """Any key of the tenant may read; another tenant's workflow answers 404."""
    # This process's replays not yet flushed count too: a caller reads its own.
    unflushed = svc.storms.unflushed(principal.tenant, workflow_id)
    now = svc.clock.now()
    return await svc.store.read(
        partial(
            workflows.workflow_view,
            principal=principal,
            workflow_id=workflow_id,
            now=now,
            unflushed=unflushed,
        )
    )


async def put_attendee(
    svc: Services, principal: Principal, fields: Mapping[str, Any]
) -> dict[str, Any]:
    return await svc.store.write(
        partial(
            directory.put_attendee,
            principal=principal,
            attendee_id=fields.get("id"),
            name=fields.get("name"),
            emails=fields["emails"],
            clock=svc.clock,
        )
    )
