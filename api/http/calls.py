"""From validated request fields to engine use cases, and back to responses.

Both paths into a tool (its endpoint and ``/v1/tool-calls``) go through these
functions, so the same intent gets the same key either way.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from aiohttp import web

from slotward.api.http.context import Services
from slotward.engine.errors import ValidationFailed
from slotward.engine.model import Principal, Reply
from slotward.engine.rules.attendees import parse_attendees
from slotward.engine.rules.documents import encode
from slotward.engine.rules.fingerprint import check_client_key, check_step
from slotward.engine.rules.timenorm import normalize_interval, parse_instant
from slotward.engine.usecases.lifecycle import HoldAction, commit_hold, release_hold
from slotward.engine.usecases.placing import HoldRequest, lookup_replay, place_hold
from slotward.engine.usecases.reads import AvailabilityQuery, availability

__all__ = [
    "REPLY",
    "client_key",
    "commit",
    "create_hold",
    "find_slots",
    "json_response",
    "release",
    "reply_response",
]

JSON = "application/json"


# The Reply behind a response, for the telemetry middleware.
REPLY = web.ResponseKey("slotward.reply", Reply)


def reply_response(reply: Reply) -> web.Response:
    """A mutating call's answer, with its idempotency headers."""
    response = web.Response(
        status=201 if reply.created else 200,
        body=reply.body,
        content_type=JSON,
        headers={
            "Idempotency-Key": reply.key,
            "Idempotent-Replayed": "true" if reply.replayed else "false",
        },
    )
    if reply.hold_status is not None:
        response.headers["Slotward-Hold-Status"] = reply.hold_status
    response[REPLY] = reply
    return response


def json_response(doc: Any, status: int = 200) -> web.Response:
    return web.Response(status=status, body=encode(doc), content_type=JSON)


def client_key(request: web.Request) -> str | None:
    raw = request.headers.get("Idempotency-Key")
    return None if raw is None else check_client_key(raw)


def _hold_request(
    principal: Principal,
    fields: dict[str, Any],
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
    fields: dict[str, Any],
    workflow_id: str,
    step: object,
    key: str | None,
) -> Reply:
    """Replay from a read if the answer is known; else place it in one write."""
    req = _hold_request(principal, fields, workflow_id, step, key, svc.policy.default_ttl_seconds)
    found = await svc.store.read(lambda uow: lookup_replay(uow, req, svc.policy, svc.clock))
    reply = found.reply
    if reply is None:
        reply = await svc.inflight.run(
            principal.tenant,
            found.key,
            lambda: svc.store.write(
                lambda uow: place_hold(uow, req, svc.policy, svc.clock, svc.ids)
            ),
        )
    await svc.storms.observe(principal.tenant, workflow_id, reply)
    return reply


async def commit(svc: Services, action: HoldAction) -> Reply:
    reply = await svc.store.write(
        lambda uow: commit_hold(uow, action, svc.policy, svc.clock, svc.ids)
    )
    await svc.storms.observe(action.principal.tenant, reply.workflow_id, reply)
    return reply


async def release(svc: Services, action: HoldAction) -> Reply:
    reply = await svc.store.write(
        lambda uow: release_hold(uow, action, svc.policy, svc.clock, svc.ids)
    )
    await svc.storms.observe(action.principal.tenant, reply.workflow_id, reply)
    return reply


async def find_slots(
    svc: Services,
    principal: Principal,
    attendees: list[str],
    fields: dict[str, Any],
) -> dict[str, Any]:
    tz = fields.get("timezone")
    minutes = fields.get("duration_minutes")
    query = AvailabilityQuery(
        principal=principal,
        attendees=parse_attendees(attendees),
        start=parse_instant(fields["from"], timezone=tz, field="from"),
        end=parse_instant(fields["to"], timezone=tz, field="to"),
        duration=None if minutes is None else timedelta(minutes=minutes),
        limit=fields.get("limit", 5),
    )
    now = svc.clock.now()
    return await svc.store.read(lambda uow: availability(uow, query, svc.policy, now))
