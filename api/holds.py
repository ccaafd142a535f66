"""Services of the hold tools: place (with the replay read and the in-flight
sharing), commit, release, availability and the hold reads. Part of
api/service.py, which re-exports them; no aiohttp here.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection, Hashable, Mapping
from datetime import timedelta
from functools import partial
from typing import Any

from slotward.api.bootstrap import Services
from slotward.api.deciding import deciding
from slotward.api.replays import known_create
from slotward.api.seen import marks_of
from slotward.engine.errors import InProgress, ValidationFailed
from slotward.engine.model import HoldStatus, Principal, Reply
from slotward.engine.ports import UnitOfWork
from slotward.engine.rules.attendees import AttendeeRef, parse_attendees
from slotward.engine.rules.external import ExternalPolicy
from slotward.engine.rules.fingerprint import check_client_key, check_step
from slotward.engine.rules.timenorm import normalize_interval, parse_instant
from slotward.engine.usecases import reads
from slotward.engine.usecases.known_replays import replay_known
from slotward.engine.usecases.lifecycle import HoldAction, commit_hold, release_hold
from slotward.engine.usecases.placing import HoldRequest, Lookup, lookup_replay, place_hold

__all__ = [
    "commit",
    "create_hold",
    "find_slots",
    "get_hold",
    "list_holds",
    "release",
    "replay_known_create",
]


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
    sent: Hashable | None = None,
    also_sent: Hashable | None = None,
) -> Reply:
    """Replay from a read if the answer may be known (api/seen.py); else place it in
    one write, which replays it if it was known after all.

    ``fields`` are the tool's canonical arguments (engine/tools.py CREATE_HOLD).
    ``sent``: the request as it came (its caller and bytes), under which a new
    hold is remembered for :func:`replay_known_create` (api/replays.py);
    ``also_sent``: another name of the same request (a tool call's body as
    sent, beside its parsed call), under which it is remembered too.
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
        found = await svc.peek(look)
        reply = found.reply or await svc.inflight.run(principal.tenant, found.key, write, marks)
    else:  # never answered here: the write's own checks are the only ones needed
        reply = await _unseen(svc, principal.tenant, marks, write, look)
    svc.seen.add(marks)
    if sent is not None and key is None:
        known = known_create(principal.tenant, workflow_id, req.attendees, reply)
        if known is not None:
            svc.known.add(sent, known)
            if also_sent is not None:
                svc.known.add(also_sent, known)
    await svc.storms.observe(principal.tenant, workflow_id, reply)
    return reply


async def replay_known_create(svc: Services, principal: Principal, sent: Hashable) -> Reply | None:
    """The replay of a create this process answered, sent again as it was first sent
    (api/replays.py); None when it is not known here or no longer replays as it
    did: then :func:`create_hold` answers it."""
    known = svc.known.get(sent)
    if known is None:
        return None
    # One statement (Ledger.replay_state): no BEGIN and ROLLBACK around it.
    reply = await svc.peek(partial(replay_known, known=known, now=svc.clock.now()), alone=True)
    if reply is None:
        svc.known.forget(sent)
        return None
    await svc.storms.observe(principal.tenant, known.workflow_id, reply)
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
    """One hold: a lookup by its primary key, so a peek (no hop to a reader thread)."""
    now = svc.clock.now()
    return await svc.peek(
        partial(reads.get_hold, principal=principal, hold_id=hold_id, now=now), alone=True
    )  # one statement: no BEGIN and ROLLBACK around it


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
