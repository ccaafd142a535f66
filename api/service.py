"""Application services: the one way from an entrypoint into the use cases.

The HTTP handlers (api/http), the CLI (api/cli) and, later, MCP decode their
input, call one function here and encode what it returns; the rules between
a call and the engine live here, not in them: the priority cap, tool dispatch
and argument aliases, the workflow-or-own-key rule and the long poll (in
api/ledger.py), approvals and their long poll (api/approvals.py), key
management (api/keys.py), the audit chain (api/auditing.py); all are
re-exported here.
Nothing here imports aiohttp (tests/test_service_layer.py checks).
Client keys arrive raw (``Idempotency-Key`` as sent) and are checked here.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Mapping
from datetime import timedelta
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
from slotward.api.deciding import deciding
from slotward.api.keys import ROLES, NewKey, create_key, issue_key, revoke_key, withdraw_key
from slotward.api.ledger import acquire_execution, complete_execution, get_execution
from slotward.api.seen import marks_of
from slotward.engine.errors import Forbidden, InProgress, ValidationFailed
from slotward.engine.model import HoldStatus, Principal, Reply, Role
from slotward.engine.ports import UnitOfWork
from slotward.engine.rules.attendees import AttendeeRef, parse_attendees
from slotward.engine.rules.external import ExternalPolicy
from slotward.engine.rules.fingerprint import check_client_key, check_step
from slotward.engine.rules.timenorm import normalize_interval, parse_instant
from slotward.engine.tools import (
    COMMIT_HOLD,
    CREATE_HOLD,
    FIND_FREE_SLOTS,
    RELEASE_HOLD,
    tool_named,
)
from slotward.engine.usecases import directory, reads, workflows
from slotward.engine.usecases.lifecycle import HoldAction, commit_hold, release_hold
from slotward.engine.usecases.placing import HoldRequest, Lookup, lookup_replay, place_hold

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
    "audited_tenants",
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
    "request_approval",
    "require_role",
    "revoke_key",
    "seal_audit",
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


def _checked(client_key: str | None) -> str | None:
    return None if client_key is None else check_client_key(client_key)


# -- holds --------------------------------------------------------------------


def _hold_request(
    principal: Principal,
    fields: Mapping[str, Any],
    workflow_id: str,
    step: object,
    key: str | None,
    default_ttl: int,
) -> HoldRequest:
    priority = fields.get("priority", principal.priority)
    if priority > principal.priority:
        raise ValidationFailed(
            f"priority {priority} is above this agent's {principal.priority}; it may only lower it",
            code="priority_too_high",
            extra={"field": "priority"},
        )
    return HoldRequest(
        principal=principal,
        workflow_id=workflow_id,
        step=check_step(step),
        attendees=parse_attendees(fields["attendees"]),
        interval=normalize_interval(
            start=fields["start"],
            end=fields.get("end"),
            duration_minutes=fields.get("duration_minutes"),
            duration=fields.get("duration"),
            timezone=fields.get("timezone"),
        ),
        title=fields.get("title", ""),
        description=fields.get("description"),
        priority=priority,
        ttl_seconds=fields.get("hold_ttl_seconds", default_ttl),
        client_key=key,
    )


async def create_hold(
    svc: Services,
    principal: Principal,
    fields: Mapping[str, Any],
    *,
    workflow_id: str,
    step: object,
    client_key: str | None,
) -> Reply:
    """Replay from a read if the answer may be known (api/seen.py); else place it in
    one write, which replays it if it was known after all.

    ``fields`` are the tool's canonical arguments (engine/tools.py CREATE_HOLD).
    """
    key = _checked(client_key)
    req = _hold_request(principal, fields, workflow_id, step, key, svc.policy.default_ttl_seconds)

    def look(uow: UnitOfWork) -> Lookup:
        return lookup_replay(uow, req, svc.policy, svc.clock)

    async def write() -> Reply:
        return await deciding(
            svc,
            lambda external: svc.store.write(
                partial(place_hold, req=req, policy=svc.policy, clock=svc.clock, ids=svc.ids,
                        external=external)
            ),
        )  # fmt: skip

    marks = marks_of(req)
    if svc.seen.any_seen(marks):  # perhaps a replay: answered from a read if so
        found = await svc.store.read(look)
        reply = found.reply or await svc.inflight.run(principal.tenant, found.key, write, marks)
    else:  # never answered here: the write's own checks are the only ones needed
        reply = await _unseen(svc, principal.tenant, marks, write, look)
    svc.seen.add(marks)
    await svc.storms.observe(principal.tenant, workflow_id, reply)
    return reply


async def _unseen(
    svc: Services,
    tenant: str,
    marks: tuple[int, ...],
    write: Callable[[], Awaitable[Reply]],
    look: Callable[[UnitOfWork], Lookup],
) -> Reply:
    """A create this process has not answered: straight to its write.

    Its key is not known before the write resolves its attendees, so a
    duplicate sent meanwhile shares the write by the call's marks (its intent
    and its client key: a call of the same intent under another key writes for
    itself, and is answered by the write's own checks). One that waited too
    long is told the key all the same: from a read, which also answers it if
    the first write has landed by then.
    """
    try:
        return await svc.inflight.run(tenant, f"~{marks[0]:x}", write, marks)
    except InProgress as error:
        found = await svc.store.read(look)
        if found.reply is not None:
            return found.reply
        error.idempotency_key = found.key
        raise


async def commit(
    svc: Services, principal: Principal, hold_id: str, token: int | None, client_key: str | None
) -> Reply:
    action = HoldAction(principal, hold_id, token, _checked(client_key))
    return await _on_hold(svc, action, lambda external: partial(commit_hold, external=external))


async def release(
    svc: Services, principal: Principal, hold_id: str, client_key: str | None
) -> Reply:
    action = HoldAction(principal, hold_id, None, _checked(client_key))
    return await _on_hold(svc, action, lambda _: release_hold)  # reads no calendar


async def _on_hold(
    svc: Services,
    action: HoldAction,
    use_case: Callable[[ExternalPolicy], Callable[..., Reply]],
) -> Reply:
    """Commit or release: one write, decided again after any stale calendar is read."""
    reply = await deciding(
        svc,
        lambda external: svc.store.write(
            partial(use_case(external), action=action, policy=svc.policy, clock=svc.clock,
                    ids=svc.ids)
        ),
    )  # fmt: skip
    await svc.storms.observe(action.principal.tenant, reply.workflow_id, reply)
    return reply


async def find_slots(
    svc: Services, principal: Principal, attendees: list[str], fields: Mapping[str, Any]
) -> dict[str, Any]:
    tz = fields.get("timezone")
    minutes = fields.get("duration_minutes")
    query = reads.AvailabilityQuery(
        principal=principal,
        attendees=parse_attendees(attendees),
        start=parse_instant(fields["from"], timezone=tz, field="from"),
        end=parse_instant(fields["to"], timezone=tz, field="to"),
        duration=None if minutes is None else timedelta(minutes=minutes),
        limit=fields.get("limit", 5),
    )
    now = svc.clock.now()
    return await deciding(
        svc,
        lambda external: svc.store.read(
            partial(reads.availability, query=query, policy=svc.policy, now=now, external=external)
        ),
    )


async def get_hold(svc: Services, principal: Principal, hold_id: str) -> dict[str, Any]:
    now = svc.clock.now()
    return await svc.store.read(
        partial(reads.get_hold, principal=principal, hold_id=hold_id, now=now)
    )


async def list_holds(
    svc: Services,
    principal: Principal,
    *,
    workflow_id: str | None,
    statuses: Collection[HoldStatus] | None,
    attendee: AttendeeRef | None,
    cursor: str | None,
    limit: int,
) -> dict[str, Any]:
    now = svc.clock.now()
    return await svc.store.read(
        partial(
            reads.list_holds,
            principal=principal,
            workflow_id=workflow_id,
            statuses=statuses,
            attendee=attendee,
            cursor=cursor,
            limit=limit,
            now=now,
        )
    )


# -- the tool-call envelope -----------------------------------------------------

_Runner = Callable[
    [Services, Principal, Mapping[str, Any], dict[str, Any], str | None],
    Awaitable[Reply | dict[str, Any]],
]


async def _run_create(
    svc: Services, p: Principal, env: Mapping[str, Any], args: dict[str, Any], key: str | None
) -> Reply:
    return await create_hold(
        svc, p, args, workflow_id=env["workflow_id"], step=env.get("step"), client_key=key
    )


async def _run_commit(
    svc: Services, p: Principal, env: Mapping[str, Any], args: dict[str, Any], key: str | None
) -> Reply:
    return await commit(svc, p, args["hold_id"], args["token"], key)


async def _run_release(
    svc: Services, p: Principal, env: Mapping[str, Any], args: dict[str, Any], key: str | None
) -> Reply:
    return await release(svc, p, args["hold_id"], key)


async def _run_slots(
    svc: Services, p: Principal, env: Mapping[str, Any], args: dict[str, Any], key: str | None
) -> dict[str, Any]:
    return await find_slots(svc, p, args["attendees"], args)  # reads: no key


# How each tool of the registry runs; tests/test_tool_registry.py checks it
# covers every one.
RUNNERS: Mapping[str, _Runner] = {
    CREATE_HOLD.name: _run_create,
    COMMIT_HOLD.name: _run_commit,
    RELEASE_HOLD.name: _run_release,
    FIND_FREE_SLOTS.name: _run_slots,
}


async def call_tool(
    svc: Services, principal: Principal, envelope: Mapping[str, Any], client_key: str | None
) -> Reply | dict[str, Any]:
    """Run a tool call as an LLM emits it (``tool``, ``arguments``, ``workflow_id``, ``step``).

    A write answers a :class:`Reply` (as its own endpoint does), a read a document.
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
    return await RUNNERS[tool.name](svc, principal, envelope, tool.canonical(given), client_key)


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
