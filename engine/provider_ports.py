"""Ports of calendar providers: the adapter itself, and what the store keeps of it.

Part of engine/ports.py (which re-exports the store ports), kept apart so each
module stays readable. :class:`CalendarProvider` is what an adapter implements
(adapters/providers, or a third-party package under the entry point group
``slotward.providers``); :class:`Calendars`, :class:`Mirror` and
:class:`CalendarWrites` are the store's.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import datetime
from typing import Protocol

from slotward.engine.calendars import (
    BusyBlock,
    BusyRead,
    CalendarBinding,
    CalendarEvent,
    CalendarWrite,
    Capabilities,
    Connection,
    Window,
)
from slotward.engine.rules.delivery import Outcome

__all__ = ["CalendarProvider", "CalendarWrites", "Calendars", "Mirror"]


class CalendarProvider(Protocol):
    """A calendar adapter. Never blocks the event loop; never logs a credential.

    ``busy`` raises :class:`~slotward.engine.calendars.ProviderUnreachable` when
    the calendar cannot be read now and
    :class:`~slotward.engine.calendars.CalendarInvalid` when it was read but
    cannot be trusted. The writes answer an :class:`Outcome` (2xx is ``ok``;
    a retryable failure carries the provider's ``Retry-After``) and are
    idempotent by the event's UID: putting the same event twice leaves one
    event, deleting an event already gone is ``ok``.
    """

    name: str
    capabilities: Capabilities

    async def busy(self, conn: Connection, window: Window, cursor: str | None) -> BusyRead: ...

    async def put_event(self, conn: Connection, event: CalendarEvent) -> Outcome: ...

    async def delete_event(self, conn: Connection, uid: str) -> Outcome: ...

    async def close(self) -> None: ...


class Calendars(Protocol):
    """The attendees' calendar bindings (one per attendee) and their sync state."""

    def put(self, binding: CalendarBinding) -> None:
        """Insert the binding, or replace the attendee's whole binding (a new one
        starts its sync state afresh) and drop the old one's mirror."""
        ...

    def get(self, tenant: str, attendee: str) -> CalendarBinding | None: ...

    def for_attendees(self, tenant: str, attendees: Collection[str]) -> list[CalendarBinding]:
        """The bindings of these attendees that exist, in attendee order (one statement)."""
        ...

    def remove(self, tenant: str, attendee: str) -> bool:
        """Delete the binding and its mirror; False when the attendee has none."""
        ...

    def store_sync(self, binding: CalendarBinding, expected_version: int) -> bool:
        """Write back the sync state of ``binding`` (status through ``sync_until``)
        if the stored version is still ``expected_version`` and the stored
        binding is the same one (its ``updated_at``: a re-PUT makes another,
        whose version starts again); False (nothing written) when another read
        stored first or the binding is gone or replaced. ``binding.version`` is
        the new version."""
        ...

    def claim_due(
        self, owner: str, now: datetime, until: datetime, limit: int
    ) -> list[CalendarBinding]:
        """Claim for ``owner`` until ``until`` up to ``limit`` bindings due a read:
        ``next_sync_at <= now`` (or never read), unclaimed or their claim over.
        Soonest first. On PostgreSQL ``FOR UPDATE SKIP LOCKED``. The claim is saved."""
        ...


class Mirror(Protocol):
    """The busy blocks last read of each bound attendee's calendar."""

    def replace(self, tenant: str, attendee: str, blocks: Sequence[BusyBlock]) -> None:
        """The attendee's mirror becomes exactly ``blocks``."""
        ...

    def patch(
        self,
        tenant: str,
        attendee: str,
        changed: Mapping[str, Sequence[BusyBlock]],
        removed: Collection[str],
    ) -> None:
        """Each source in ``changed`` gets exactly its blocks; those in ``removed`` none."""
        ...

    def overlapping(
        self, tenant: str, attendees: Collection[str], start: datetime, end: datetime
    ) -> list[BusyBlock]:
        """The blocks of these attendees overlapping ``[start, end)``, by start,
        then attendee, then source."""
        ...


class CalendarWrites(Protocol):
    """What slotward's own events should be in the bound calendars (coalescing)."""

    def enqueue(self, writes: Sequence[CalendarWrite]) -> None:
        """Insert each write, or replace the row of its hold and attendee when its
        ``version`` is higher (a lower or equal one is ignored: already known).
        A replaced row is pending again, its attempts 0, its claim kept (the
        writer that holds it records a stale version and leaves it pending)."""
        ...

    def claim(self, owner: str, now: datetime, until: datetime, limit: int) -> list[CalendarWrite]:
        """Claim for ``owner`` until ``until`` up to ``limit`` pending writes due now
        (``next_attempt_at <= now``, unclaimed or their claim over), soonest first.
        On PostgreSQL ``FOR UPDATE SKIP LOCKED``. The claim is saved."""
        ...

    def get_many(self, keys: Collection[tuple[str, str, str]]) -> list[CalendarWrite]:
        """The writes of these (tenant, hold, attendee) keys that exist."""
        ...

    def save_many(self, writes: Sequence[CalendarWrite]) -> None:
        """Write back the mutable fields (state, attempts, next attempt, claim,
        written_at, last_error) of each whose stored version is still its
        ``version``; a row replaced by a newer version meanwhile is left as it
        is (one statement, whatever their number)."""
        ...

    def counts(self, tenant: str, attendee: str) -> dict[str, int]:
        """The attendee's writes by state (``pending``, ``delivered``, ``dead``;
        states with none left out)."""
        ...

    def remove_for_attendee(self, tenant: str, attendee: str) -> int:
        """Delete the attendee's writes (its binding is gone); return how many."""
        ...

    def revive(self, tenant: str, attendee: str, now: datetime) -> int:
        """Put the attendee's dead writes back to pending (attempts 0, due ``now``,
        claim cleared): the calendar is to be tried again. Return how many."""
        ...

    def purge_written(self, before: datetime, limit: int) -> int:
        """Delete up to ``limit`` delivered writes written before ``before`` whose
        hold is over (``action`` delete); return how many."""
        ...
