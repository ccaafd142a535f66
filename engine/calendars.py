"""Immutable values of calendar providers (DESIGN section 6, "Providers").

A **binding** ties one attendee to one calendar. The **mirror** is what the
provider sync worker last read of that calendar: the busy blocks that are
not slotward's own events. A **calendar write** is the state slotward wants
its own event of a hold to have in one attendee's calendar: derived from the
hold's outbox events by the relay's fan-out and carried out by the provider
writer, at least once, idempotent by the event's UID.

The values an adapter (adapters/providers, or a third-party package) is
handed and answers with are here too: :class:`Connection`,
:class:`Window`, :class:`Busy`, :class:`BusyRead`, :class:`CalendarEvent`
and :class:`Capabilities`. The port itself is in engine/provider_ports.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Literal

from slotward.engine.model import DeliveryState

__all__ = [
    "BindingStatus",
    "Busy",
    "BusyBlock",
    "BusyRead",
    "CalendarBinding",
    "CalendarEvent",
    "CalendarInvalid",
    "CalendarWrite",
    "Capabilities",
    "Connection",
    "EventStatus",
    "OnUnavailable",
    "ProviderError",
    "ProviderFactory",
    "ProviderSettings",
    "ProviderUnreachable",
    "Window",
    "WriteAction",
]

OnUnavailable = Literal["fail_closed", "last_known"]
# pending: never read yet; ok: the last read succeeded; error: the last read
# failed (unreachable) or the calendar cannot be trusted (an unknown TZID).
BindingStatus = Literal["pending", "ok", "error"]
EventStatus = Literal["TENTATIVE", "CONFIRMED"]
WriteAction = Literal["put", "delete"]


@dataclass(frozen=True, kw_only=True)
class CalendarBinding:
    """An attendee's calendar, and the state of its mirror.

    ``password`` is sealed by the server's secret box (api/secretbox.py) and
    opened only to hand an adapter its :class:`Connection`. ``version`` is
    bumped by every stored read: a read stores only if the version it began
    from is still the binding's (compare-and-set), so two reads racing (the
    sync worker's and a claim's refresh) never mix.
    """

    tenant: str
    attendee: str  # the attendee id
    provider: str  # "caldav", "ics" or a plugin's name
    url: str
    username: str | None = None
    password: str | None = field(default=None, repr=False)  # sealed, never clear
    timezone: str = "UTC"  # an IANA name: all-day and floating times are read in it
    on_unavailable: OnUnavailable = "fail_closed"
    created_at: datetime
    updated_at: datetime
    status: BindingStatus = "pending"
    synced_at: datetime | None = None  # the last successful read began: external_as_of
    covers_from: datetime | None = None  # the window the mirror holds
    covers_until: datetime | None = None
    cursor: str | None = None  # the adapter's own state: a sync token, an ETag
    version: int = 0
    error: str | None = None  # why the last read failed (no secret in it)
    error_at: datetime | None = None
    failures: int = 0  # reads failed in a row
    next_sync_at: datetime | None = None  # when the sync worker reads it next
    sync_owner: str | None = None  # a sync worker's claim on it, until sync_until
    sync_until: datetime | None = None


@dataclass(frozen=True)
class BusyBlock:
    """One busy interval of the mirror: external time of ``attendee``.

    ``source`` is what the adapter read it from (a CalDAV resource's href, an
    ICS file's event UID): an incremental read replaces a source's blocks.
    """

    tenant: str
    attendee: str
    source: str
    start: datetime
    end: datetime


@dataclass(frozen=True, kw_only=True)
class CalendarWrite:
    """What slotward's own event of ``hold_id`` should be in ``attendee``'s calendar.

    One row per hold and attendee, coalescing: a later event of the hold
    (a higher ``version``, the event's per-hold sequence) replaces what an
    earlier one asked for, so the writer always converges on the latest
    state and an old state never overwrites a newer one. ``state`` is the
    delivery's: pending until written, dead when the schedule is exhausted.
    """

    tenant: str
    hold_id: str
    attendee: str
    uid: str
    action: WriteAction
    status: EventStatus | None  # for a put
    start: datetime
    end: datetime
    summary: str
    description: str
    version: int
    state: DeliveryState
    attempts: int
    next_attempt_at: datetime
    updated_at: datetime
    claim_owner: str | None = None
    claim_until: datetime | None = None
    written_at: datetime | None = None
    last_error: str | None = None

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.tenant, self.hold_id, self.attendee)


# -- what adapters are given and answer -----------------------------------------


@dataclass(frozen=True)
class Connection:
    """A binding as an adapter sees it: where, as whom, and in which time zone.

    The password is open here and nowhere else; ``repr`` never shows it.
    """

    url: str
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    timezone: str = "UTC"


@dataclass(frozen=True)
class Window:
    """The half-open span ``[start, end)`` a read covers (UTC)."""

    start: datetime
    end: datetime


@dataclass(frozen=True)
class Busy:
    """One blocking interval an adapter read: an event that is not transparent
    or cancelled (a tentative one blocks), one instance of a recurring one."""

    source: str
    uid: str
    start: datetime
    end: datetime


@dataclass(frozen=True)
class BusyRead:
    """What one read of a calendar found.

    ``full``: ``busy`` is everything in the window (the mirror is replaced).
    Otherwise it is a change since ``cursor`` was handed in: the sources in
    ``changed`` are replaced by their blocks in ``busy`` (none: no longer
    busy), those in ``removed`` are gone. ``unchanged``: nothing changed
    (a 304, the same sync token); ``busy`` is empty then. ``cursor`` is kept
    and handed back on the next read.
    """

    full: bool
    busy: tuple[Busy, ...] = ()
    changed: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()
    unchanged: bool = False
    cursor: str | None = None


@dataclass(frozen=True)
class CalendarEvent:
    """slotward's own event of a hold, as written to a calendar."""

    uid: str
    start: datetime
    end: datetime
    summary: str
    description: str
    status: EventStatus
    sequence: int  # the hold's event sequence: a newer write has a higher one


@dataclass(frozen=True)
class Capabilities:
    """What an adapter can do: shown by ``slotward providers list``, checked on binding."""

    writes: bool  # put_event and delete_event reach the calendar
    credentials: bool  # takes a username and password
    incremental: bool  # busy() reads changes since a cursor
    schemes: tuple[str, ...] = ("https", "http")  # URL schemes a binding may use
    description: str = ""


@dataclass(frozen=True)
class ProviderSettings:
    """What every adapter is built with (its factory's one argument).

    ``allow_private_urls``: the server's SSRF rule (SLOTWARD_ALLOW_PRIVATE_URLS);
    an adapter that opens connections resolves hosts through the same guard as
    the webhook sender (adapters/webhooks/resolver.py) and refuses what it
    refuses. ``timeout``: seconds for one request to the calendar.
    """

    timeout: float = 10.0
    allow_private_urls: bool = False
    user_agent: str = "slotward"


class ProviderError(Exception):
    """A read or write of a calendar failed. The message names what failed and
    never carries a credential; ``retry_after`` is the provider's, if it said."""

    def __init__(self, message: str, *, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class ProviderUnreachable(ProviderError):
    """The calendar could not be read now (network, timeout, 5xx, refused
    credentials): the binding's ``on_unavailable`` policy decides."""


class CalendarInvalid(ProviderError):
    """The calendar was read but cannot be trusted (an unknown TZID without its
    VTIMEZONE, data that does not parse): the binding is in error until fixed."""


# An entry point of group ``slotward.providers`` names one of these: called with
# the server's settings, it returns the adapter (a CalendarProvider).
ProviderFactory = Callable[[ProviderSettings], object]
