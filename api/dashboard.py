"""Services of the dashboard's reads: the timeline, the busiest workflows, and the
audit chain as a live feed. Part of api/service.py, which re-exports them; no aiohttp.

The feed is what ``GET /v1/audit/stream`` sends as server-sent events: it
reads the tenant's entries after a seq every ``poll_seconds`` (one indexed
read, whatever happened meanwhile), and ends when the server shuts down, when
its client has gone, or when its caller's key or session no longer holds.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from functools import partial
from typing import Any

from slotward.api.auditing import list_audit
from slotward.api.bootstrap import Services
from slotward.engine.model import Principal
from slotward.engine.rules.attendees import parse_attendees
from slotward.engine.rules.timenorm import parse_instant
from slotward.engine.usecases import dashboard_reads
from slotward.engine.usecases.timeline import TimelineQuery
from slotward.engine.usecases.timeline import timeline as timeline_of

__all__ = ["KEEPALIVE", "audit_feed", "audit_head", "busiest_workflows", "timeline"]

# What the feed yields when it has been quiet for a while: a keep-alive is due.
KEEPALIVE = None
_BATCH = 200  # entries per read of the feed


async def timeline(
    svc: Services, principal: Principal, fields: Mapping[str, Any], attendees: Sequence[str]
) -> dict[str, Any]:
    """The holds and external busy time of ``fields``' window (``from``, ``to``,
    ``timezone``), one row per attendee, ``attendees``' rows included."""
    tz = fields.get("timezone")
    query = TimelineQuery(
        principal=principal,
        start=parse_instant(fields["from"], timezone=tz, field="from"),
        end=parse_instant(fields["to"], timezone=tz, field="to"),
        attendees=parse_attendees(list(attendees)) if attendees else (),
    )
    now = svc.clock.now()
    return await svc.store.read(partial(timeline_of, query=query, policy=svc.policy, now=now))


async def busiest_workflows(svc: Services, principal: Principal, limit: int) -> dict[str, Any]:
    """The tenant's workflows by replays, most first; this process's unflushed ones count."""
    tenant = principal.tenant
    return await svc.store.read(
        partial(
            dashboard_reads.busiest_workflows,
            principal=principal,
            limit=limit,
            unflushed=lambda workflow_id: svc.storms.unflushed(tenant, workflow_id),
        )
    )


async def audit_head(svc: Services, principal: Principal) -> int:
    """The seq of the tenant's last audit entry (0: none yet)."""
    return await svc.store.read(partial(dashboard_reads.audit_head, principal=principal))


async def audit_feed(
    svc: Services,
    principal: Principal,
    after: int,
    *,
    closing: asyncio.Event,
    gone: Callable[[], bool],
    still_allowed: Callable[[], Awaitable[bool]],
) -> AsyncGenerator[dict[str, Any] | None, None]:
    """The tenant's audit entries after seq ``after``, as ``GET /v1/audit`` shows
    them, as they are appended; :data:`KEEPALIVE` after a quiet while.

    Ends when ``closing`` is set (the server stops), when ``gone()`` (the
    client left) or when ``still_allowed()`` says no, asked every
    ``recheck_seconds``. Time is counted in polls: nothing here decides by it
    but when to look again.
    """
    settings = svc.stream
    cursor, quiet, unchecked = after, 0.0, 0.0
    while not closing.is_set() and not gone():
        page = await list_audit(svc, principal, cursor, _BATCH)
        for entry in page["items"]:
            cursor = entry["seq"]
            yield entry
        if page["items"]:
            quiet = 0.0
            if page["next_cursor"] is not None:
                continue  # more are waiting: read on at once
        elif quiet >= settings.keepalive_seconds:
            quiet = 0.0
            yield KEEPALIVE
        if await _pause(closing, settings.poll_seconds):
            return
        quiet += settings.poll_seconds
        unchecked += settings.poll_seconds
        if unchecked >= settings.recheck_seconds:
            unchecked = 0.0
            if not await still_allowed():
                return


async def _pause(closing: asyncio.Event, seconds: float) -> bool:
    """Wait ``seconds``, or less if ``closing`` is set meanwhile; whether it is."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(closing.wait(), seconds)
    return closing.is_set()
