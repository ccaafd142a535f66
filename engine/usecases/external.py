"""External busy time inside a decision's transaction (DESIGN section 6, "Providers").

The bindings of the claim's attendees and their mirror are read in the same
transaction as the holds. A mirror too old for the decision raises
:class:`~slotward.engine.rules.external.NeedsRefresh` before anything is
written: the service reads those calendars outside any lock and decides again.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

from slotward.engine.calendars import BusyBlock, Window
from slotward.engine.ports import UnitOfWork
from slotward.engine.rules.external import (
    ExternalPolicy,
    ExternalView,
    NeedsRefresh,
    needs_refresh,
    view_of,
)

__all__ = ["blocks_between", "external_view"]


def external_view(
    uow: UnitOfWork,
    tenant: str,
    attendees: Collection[str],
    start: datetime,
    end: datetime,
    now: datetime,
    policy: ExternalPolicy | None,
    *,
    bound: bool = True,
) -> ExternalView:
    """The external time of ``attendees`` over ``[start, end)``, fresh enough to decide on.

    ``policy`` None: the caller has no providers (external time is not read).
    ``bound`` False: none of the attendees has a calendar, as read already in
    this transaction (Ledger.lookup_claim), so there is nothing to read.
    """
    if policy is None or not bound:
        return ExternalView()
    bindings = uow.calendars.for_attendees(tenant, attendees)
    if not bindings:
        return ExternalView()
    stale = [b for b in bindings if needs_refresh(b, start, end, now, policy)]
    if stale:
        raise NeedsRefresh(stale, Window(start, end))
    blocks = uow.mirror.overlapping(tenant, [b.attendee for b in bindings], start, end)
    return view_of(bindings, blocks, policy)


def blocks_between(
    uow: UnitOfWork, tenant: str, view: ExternalView, start: datetime, end: datetime
) -> list[BusyBlock]:
    """The mirror's blocks of the view's bound attendees over a wider span (the
    alternatives' horizon), as the mirror has them: no refresh for a suggestion."""
    if not view.attendees:
        return []
    return uow.mirror.overlapping(tenant, sorted(view.attendees), start, end)
