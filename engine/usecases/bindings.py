"""Use cases of the calendar binding API: bind an attendee to a calendar, read it, unbind it.

Each function is one transaction; each write locks its tenant first and appends
an audit entry for its change. The binding's fields come checked from the
caller (api/calendars.py: the provider's capabilities and the URL's SSRF check
need the adapters and DNS, which the engine has neither of); the password comes
as a function that seals it for the attendee id, because the id is only known
here, once the directory has been read inside the transaction, and a sealed
password must open for that attendee alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from slotward.engine.calendars import CalendarBinding, OnUnavailable
from slotward.engine.errors import NotFound, ValidationFailed
from slotward.engine.model import Principal
from slotward.engine.ports import Clock, UnitOfWork
from slotward.engine.rules.attendees import AttendeeRef, parse_attendees, resolve_attendees
from slotward.engine.rules.calendar_documents import binding_document
from slotward.engine.rules.calendar_events import write_for_hold
from slotward.engine.rules.policy import Policy
from slotward.engine.rules.timenorm import LATEST
from slotward.engine.usecases.effects import audit

__all__ = [
    "NewBinding",
    "Sealer",
    "delete_binding",
    "describe_binding",
    "get_binding",
    "parse_attendee",
    "put_binding",
    "resolve_attendee",
]

Sealer = Callable[[str], str | None]
"""attendee id -> the binding's password sealed for it, or None without a password."""


@dataclass(frozen=True)
class NewBinding:
    """A binding to store, its fields checked already (no password here: see :data:`Sealer`)."""

    attendee: AttendeeRef
    provider: str
    url: str
    username: str | None
    timezone: str
    on_unavailable: OnUnavailable


def parse_attendee(value: str) -> AttendeeRef:
    """The ``{attendee}`` of a path: an attendee id or an email (422 ``invalid_attendee``)."""
    try:
        return parse_attendees([value])[0]
    except ValidationFailed as exc:
        exc.extra.pop("index", None)
        exc.extra["field"] = "attendee"
        raise


def resolve_attendee(
    uow: UnitOfWork, tenant: str, ref: AttendeeRef, *, allow_unknown: bool
) -> tuple[str, tuple[tuple[str, str], ...]]:
    """The attendee id ``ref`` names in ``tenant``, and the email to register with it
    when the directory does not know it yet (engine/rules/attendees.py). Without
    ``allow_unknown`` an unknown attendee is 422 ``unknown_attendee``."""
    emails = [ref.value] if ref.kind == "email" else []
    ids = [ref.value] if ref.kind == "id" else []
    directory, known = uow.directory.lookup(tenant, emails, ids)
    try:
        resolved = resolve_attendees(
            tenant, (ref,), directory=directory, known_ids=known, allow_unknown=allow_unknown
        )
    except ValidationFailed as exc:
        exc.extra["field"] = "attendee"
        raise
    return resolved.ids[0], resolved.new


def _document(uow: UnitOfWork, binding: CalendarBinding) -> dict[str, Any]:
    return binding_document(binding, uow.calendar_writes.counts(binding.tenant, binding.attendee))


def describe_binding(uow: UnitOfWork, binding: CalendarBinding) -> dict[str, Any]:
    """``binding``'s document (as a read of it just stored it), with its writes' counts."""
    with uow:
        return _document(uow, binding)


def put_binding(
    uow: UnitOfWork,
    principal: Principal,
    new: NewBinding,
    seal: Sealer,
    *,
    writes: bool,
    policy: Policy,
    clock: Clock,
) -> CalendarBinding:
    """Bind the attendee to the calendar (replacing its binding, sync state and
    mirror, if any); answer the binding as stored.

    When the adapter writes (``writes``), each live hold of the attendee is
    queued for the new calendar, so a calendar bound after the fact shows the
    holds placed before it. When the calendar changes (another provider or URL),
    the attendee's earlier writes are dropped first: they were for the old
    calendar, and a write already delivered there would hide the same write
    from the new one (a write of an equal version is ignored). The same
    calendar bound again (a new password, a key rotation, another policy)
    keeps them: a delete or a commit still waiting to be written is not lost,
    and the dead ones are tried again (a re-PUT is the re-drive of a calendar's
    writes).
    """
    tenant = principal.tenant
    with uow:
        uow.lock_tenant(tenant)
        now = clock.now()
        attendee, first_seen = resolve_attendee(
            uow, tenant, new.attendee, allow_unknown=policy.allow_unknown_attendees
        )
        uow.directory.register(tenant, first_seen, now)
        old = uow.calendars.get(tenant, attendee)
        binding = CalendarBinding(
            tenant=tenant, attendee=attendee, provider=new.provider, url=new.url,
            username=new.username, password=seal(attendee), timezone=new.timezone,
            on_unavailable=new.on_unavailable,
            created_at=now if old is None else old.created_at, updated_at=now,
        )  # fmt: skip
        uow.calendars.put(binding)
        if old is None or (old.provider, old.url) != (binding.provider, binding.url):
            uow.calendar_writes.remove_for_attendee(tenant, attendee)
        else:  # the same calendar: its dead writes are tried again
            uow.calendar_writes.revive(tenant, attendee, now)
        if writes:
            _backfill(uow, binding, now)
        audit(uow, tenant, principal.agent_id, now, "calendar.bind", attendee, None, "bound",
              audit_key=policy.audit_key)  # fmt: skip
        stored = uow.calendars.get(tenant, attendee)
        uow.commit()
    return stored or binding


def _backfill(uow: UnitOfWork, binding: CalendarBinding, now: datetime) -> None:
    holds = uow.holds.blocking(binding.tenant, (binding.attendee,), now, LATEST, now)
    queued = [write_for_hold(hold, binding.attendee, now) for hold in holds]
    uow.calendar_writes.enqueue([w for w in queued if w is not None])


def _load(uow: UnitOfWork, tenant: str, ref: AttendeeRef) -> CalendarBinding:
    attendee, _ = resolve_attendee(uow, tenant, ref, allow_unknown=True)
    found = uow.calendars.get(tenant, attendee)
    if found is None:
        raise NotFound(
            f"attendee {ref.value!r} has no calendar bound", code="calendar_not_found",
            extra={"attendee": attendee},
        )  # fmt: skip
    return found


def get_binding(uow: UnitOfWork, principal: Principal, attendee: AttendeeRef) -> dict[str, Any]:
    """The attendee's binding, its sync state and its writes' counts (404 calendar_not_found)."""
    with uow:
        return _document(uow, _load(uow, principal.tenant, attendee))


def delete_binding(
    uow: UnitOfWork, principal: Principal, attendee: AttendeeRef, policy: Policy, clock: Clock
) -> None:
    """Unbind the attendee: its binding, mirror and pending writes go (the events
    already written stay in the calendar); 404 ``calendar_not_found`` without one."""
    tenant = principal.tenant
    with uow:
        uow.lock_tenant(tenant)
        now = clock.now()
        binding = _load(uow, tenant, attendee)
        uow.calendars.remove(tenant, binding.attendee)
        uow.calendar_writes.remove_for_attendee(tenant, binding.attendee)
        audit(uow, tenant, principal.agent_id, now, "calendar.unbind", binding.attendee, None,
              "unbound", audit_key=policy.audit_key)  # fmt: skip
        uow.commit()
