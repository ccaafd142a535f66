"""Use case: maintain the tenant's attendee directory (ids and email aliases)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from slotward.engine.errors import Conflict
from slotward.engine.model import Principal
from slotward.engine.ports import Clock, UnitOfWork
from slotward.engine.rules.attendees import attendee_id_for_email, normalize_email

__all__ = ["put_attendee"]


def put_attendee(
    uow: UnitOfWork,
    principal: Principal,
    attendee_id: str | None,
    name: str | None,
    emails: Sequence[str],
    clock: Clock,
) -> dict[str, Any]:
    """Create or update an attendee; every email becomes an alias of it.

    An upsert: sending the same document twice leaves the directory as once.
    Without an id, the attendee takes the id its first email resolves to: the
    attendee the directory has for it, else the id derived from it. (After
    migration 0005 a stored alias may name an attendee whose id was derived
    from an older spelling; a repeated document still names that attendee.)
    """
    normalized = sorted({normalize_email(e) for e in emails})
    with uow:
        uow.lock_tenant(principal.tenant)
        current, _ = uow.directory.lookup(principal.tenant, normalized, ())
        chosen = (
            attendee_id
            or current.get(normalized[0])
            or attendee_id_for_email(principal.tenant, normalized[0])
        )
        taken = sorted(e for e, owner in current.items() if owner != chosen)
        if taken:
            # Holds and keys name attendees by id: moving an email to another id
            # would hide its holds from new claims and give old intents new keys.
            raise Conflict(
                f"{', '.join(taken)} already belong to another attendee; "
                "an email cannot move between attendees",
                code="email_in_use",
                extra={"emails": taken},
            )
        uow.directory.put(principal.tenant, chosen, name, normalized, clock.now())
        uow.commit()
    return {"id": chosen, "name": name, "emails": normalized}
