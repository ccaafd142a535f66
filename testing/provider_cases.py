"""The calendars the provider conformance kit writes, and what each must read as.

Each case is an iCalendar text (what a harness puts into the calendar behind
slotward's back) and the busy spans an adapter must find in it, worked out
here independently of any iCalendar library: UTC instants, half-open. Used
by :mod:`slotward.testing.providers`; an adapter author may use the texts in
their own tests too.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

from slotward.engine.calendars import Window

__all__ = [
    "BERLIN_VTIMEZONE",
    "Case",
    "Span",
    "dst_series",
    "recurrence",
    "statuses",
    "vcalendar",
    "vevent",
]

Span = tuple[datetime, datetime]

BERLIN_VTIMEZONE = "\r\n".join(
    [
        "BEGIN:VTIMEZONE",
        "TZID:Europe/Berlin",
        "BEGIN:DAYLIGHT",
        "TZOFFSETFROM:+0100",
        "TZOFFSETTO:+0200",
        "TZNAME:CEST",
        "DTSTART:19700329T020000",
        "RRULE:FREQ=YEARLY;BYMONTH=3;BYDAY=-1SU",
        "END:DAYLIGHT",
        "BEGIN:STANDARD",
        "TZOFFSETFROM:+0200",
        "TZOFFSETTO:+0100",
        "TZNAME:CET",
        "DTSTART:19701025T030000",
        "RRULE:FREQ=YEARLY;BYMONTH=10;BYDAY=-1SU",
        "END:STANDARD",
        "END:VTIMEZONE",
    ]
)


@dataclass(frozen=True)
class Case:
    """An event put into a calendar (``ics``, one VCALENDAR) and, for ``uid``,
    the spans a read of ``window`` must find: exactly these."""

    uid: str
    ics: str
    window: Window
    spans: frozenset[Span]


def _utc(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")


def vevent(
    uid: str,
    start: datetime,
    end: datetime,
    *,
    status: str | None = None,
    transp: str | None = None,
    sequence: int = 0,
    summary: str = "External meeting",
    extra: tuple[str, ...] = (),
) -> str:
    """One VEVENT with UTC times (``extra``: more content lines, written as given)."""
    lines = [
        "BEGIN:VEVENT",
        f"UID:{uid}",
        "DTSTAMP:20300101T000000Z",
        f"DTSTART:{_utc(start)}",
        f"DTEND:{_utc(end)}",
        f"SUMMARY:{summary}",
        f"SEQUENCE:{sequence}",
    ]
    lines += [f"STATUS:{status}"] if status else []
    lines += [f"TRANSP:{transp}"] if transp else []
    return "\r\n".join([*lines, *extra, "END:VEVENT"])


def vcalendar(*components: str) -> str:
    """A VCALENDAR holding ``components`` (VEVENTs, VTIMEZONEs), CRLF line ends."""
    head = ["BEGIN:VCALENDAR", "VERSION:2.0", "PRODID:-//slotward//conformance kit//EN"]
    return "\r\n".join([*head, *components, "END:VCALENDAR"]) + "\r\n"


def dst_series(uid: str = "kit-dst-series@example.com") -> Case:
    """Every Monday 09:00-10:00 Europe/Berlin from 18 March to 4 November 2030:
    across both 2030 changes (31 March, 27 October), so 08:00Z, then 07:00Z
    from April to October, then 08:00Z again."""
    berlin = ZoneInfo("Europe/Berlin")
    event = "\r\n".join(
        [
            "BEGIN:VEVENT",
            f"UID:{uid}",
            "DTSTAMP:20300101T000000Z",
            "DTSTART;TZID=Europe/Berlin:20300318T090000",
            "DTEND;TZID=Europe/Berlin:20300318T100000",
            "RRULE:FREQ=WEEKLY;BYDAY=MO;UNTIL=20301104T235959Z",
            "SUMMARY:Weekly in Berlin",
            "END:VEVENT",
        ]
    )
    spans = set()
    day = date(2030, 3, 18)
    while day <= date(2030, 11, 4):
        start = datetime(day.year, day.month, day.day, 9, tzinfo=berlin).astimezone(UTC)
        spans.add((start, start + timedelta(hours=1)))
        day += timedelta(weeks=1)
    window = Window(datetime(2030, 3, 1, tzinfo=UTC), datetime(2030, 11, 30, tzinfo=UTC))
    return Case(uid, vcalendar(BERLIN_VTIMEZONE, event), window, frozenset(spans))


def recurrence(uid: str = "kit-daily@example.com") -> Case:
    """Daily 10:00-11:00Z for five days from 3 June 2030; the second day
    excluded (EXDATE), the fourth moved to 14:00-15:00Z (RECURRENCE-ID)."""
    first = datetime(2030, 6, 3, 10, tzinfo=UTC)
    days = [first + timedelta(days=n) for n in range(5)]
    master = vevent(
        uid, days[0], days[0] + timedelta(hours=1),
        extra=("RRULE:FREQ=DAILY;COUNT=5", f"EXDATE:{_utc(days[1])}"),
    )  # fmt: skip
    moved = days[3].replace(hour=14)
    override = vevent(
        uid, moved, moved + timedelta(hours=1), sequence=1, summary="Moved",
        extra=(f"RECURRENCE-ID:{_utc(days[3])}",),
    )  # fmt: skip
    spans = {(d, d + timedelta(hours=1)) for d in (days[0], days[2], days[4])}
    spans.add((moved, moved + timedelta(hours=1)))
    window = Window(datetime(2030, 6, 1, tzinfo=UTC), datetime(2030, 6, 15, tzinfo=UTC))
    return Case(uid, vcalendar(master, override), window, frozenset(spans))


def statuses() -> tuple[Window, dict[str, str], frozenset[str]]:
    """Four events on 10 June 2030, one an hour from 09:00Z: TRANSPARENT,
    CANCELLED, TENTATIVE and CONFIRMED. The window, each event's iCalendar
    text by UID, and the UIDs that must block (tentative and confirmed)."""
    start = datetime(2030, 6, 10, 9, tzinfo=UTC)
    kinds: dict[str, tuple[str | None, str | None]] = {  # uid -> (STATUS, TRANSP)
        "kit-transparent@example.com": (None, "TRANSPARENT"),
        "kit-cancelled@example.com": ("CANCELLED", None),
        "kit-tentative@example.com": ("TENTATIVE", None),
        "kit-confirmed@example.com": ("CONFIRMED", "OPAQUE"),
    }
    texts = {}
    for n, (uid, (status, transp)) in enumerate(kinds.items()):
        begin = start + timedelta(hours=n)
        end = begin + timedelta(hours=1)
        texts[uid] = vcalendar(vevent(uid, begin, end, status=status, transp=transp))
    window = Window(start - timedelta(days=1), start + timedelta(days=1))
    blocking = frozenset({"kit-tentative@example.com", "kit-confirmed@example.com"})
    return window, texts, blocking
