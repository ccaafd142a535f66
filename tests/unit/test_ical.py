"""iCalendar data read into busy time, and slotward's own event rendered.

2030 in Europe/Berlin: summer time begins on Sunday 31 March and ends on
Sunday 27 October. A 09:00-10:00 local meeting is 08:00Z in winter, 07:00Z
in summer. A TZID is known when the file defines it (VTIMEZONE) or icalendar
names it (IANA, Windows, a vendor-prefixed IANA name); anything else is
unknown and refused, never read as floating time.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from slotward.adapters.providers.ical import (
    MAX_BYTES,
    MAX_INSTANCES,
    Budget,
    read_busy,
    render_event,
)
from slotward.engine.calendars import Busy, CalendarEvent, CalendarInvalid, Window

DATA = Path(__file__).resolve().parent.parent / "data" / "ics"
BERLIN_VTIMEZONE = (DATA / "berlin_vtimezone.ics").read_text()
SPRING = Window(datetime(2030, 3, 18, tzinfo=UTC), datetime(2030, 4, 8, tzinfo=UTC))
AUTUMN = Window(datetime(2030, 10, 14, tzinfo=UTC), datetime(2030, 11, 4, tzinfo=UTC))
YEAR = Window(datetime(2030, 1, 1, tzinfo=UTC), datetime(2031, 1, 1, tzinfo=UTC))


def z(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> datetime:
    return datetime(year, month, day, hour, minute, tzinfo=UTC)


def calendar(*events: str, timezones: str = "") -> bytes:
    body = "".join(events)
    text = f"BEGIN:VCALENDAR\nVERSION:2.0\nPRODID:-//test//EN\n{timezones}{body}END:VCALENDAR\n"
    return text.replace("\n", "\r\n").encode()


def event(uid: str, *lines: str) -> str:
    inner = "".join(f"{line}\n" for line in lines)
    return f"BEGIN:VEVENT\nUID:{uid}\nDTSTAMP:20300101T000000Z\n{inner}END:VEVENT\n"


def weekly(tzid: str, *extra: str) -> str:
    """Mondays 09:00-10:00 in ``tzid`` from 7 January 2030."""
    return event(
        "weekly",
        f"DTSTART;TZID={tzid}:20300107T090000",
        f"DTEND;TZID={tzid}:20300107T100000",
        "RRULE:FREQ=WEEKLY;BYDAY=MO",
        *extra,
    )


def spans(blocks: list[Busy]) -> list[tuple[datetime, datetime]]:
    return [(b.start, b.end) for b in blocks]


def hour(year: int, month: int, day: int, at: int) -> tuple[datetime, datetime]:
    start = z(year, month, day, at)
    return (start, start + timedelta(hours=1))


SPRING_MONDAYS = [hour(2030, 3, 18, 8), hour(2030, 3, 25, 8), hour(2030, 4, 1, 7)]
AUTUMN_MONDAYS = [hour(2030, 10, 14, 7), hour(2030, 10, 21, 7), hour(2030, 10, 28, 8)]


# -- time zones across DST ------------------------------------------------------------


@pytest.mark.parametrize(
    ("tzid", "timezones"),
    [
        ("Europe/Berlin", ""),  # IANA, no VTIMEZONE: known
        ("Europe/Berlin", BERLIN_VTIMEZONE),
        ("Berlin Office Time", BERLIN_VTIMEZONE.replace("Europe/Berlin", "Berlin Office Time")),
        ("W. Europe Standard Time", ""),  # a Windows name (Outlook)
        ("/freeassociation.sourceforge.net/Europe/Berlin", ""),  # libical's prefix
    ],
    ids=["iana", "iana-with-vtimezone", "custom-vtimezone", "windows", "vendor-prefix"],
)
def test_a_weekly_event_keeps_its_local_time_across_both_changes(tzid: str, timezones: str) -> None:
    data = calendar(weekly(tzid), timezones=timezones)
    assert spans(read_busy(data, SPRING, "UTC")) == SPRING_MONDAYS
    assert spans(read_busy(data, AUTUMN, "UTC")) == AUTUMN_MONDAYS
    assert len(read_busy(data, YEAR, "UTC")) == 52


def test_a_vtimezone_naming_an_iana_zone_is_read_as_the_iana_zone() -> None:
    stale = (
        "BEGIN:VTIMEZONE\nTZID:Europe/Berlin\nBEGIN:STANDARD\nDTSTART:19700101T000000\n"
        "TZOFFSETFROM:+0500\nTZOFFSETTO:+0500\nEND:STANDARD\nEND:VTIMEZONE\n"
    )
    data = calendar(weekly("Europe/Berlin"), timezones=stale)
    assert spans(read_busy(data, SPRING, "UTC")) == SPRING_MONDAYS


def test_times_come_out_in_utc() -> None:
    (block, *_) = read_busy(calendar(weekly("Europe/Berlin")), SPRING, "Asia/Tokyo")
    assert block.start.tzinfo is UTC
    assert block.end.tzinfo is UTC


def test_an_unknown_tzid_is_refused_and_named() -> None:
    data = calendar(weekly("Mars/Olympus_Mons"))
    with pytest.raises(CalendarInvalid, match="Mars/Olympus_Mons"):
        read_busy(data, SPRING, "Europe/Berlin")


def test_an_unknown_tzid_in_an_exdate_alone_is_refused() -> None:
    data = calendar(weekly("Europe/Berlin", "EXDATE;TZID=Nowhere:20300325T090000"))
    with pytest.raises(CalendarInvalid, match="Nowhere"):
        read_busy(data, SPRING, "Europe/Berlin")


def test_a_vtimezone_of_one_calendar_does_not_resolve_another_calendars_tzid() -> None:
    """icalendar caches VTIMEZONEs process-wide, first definition winning: one
    tenant's calendar must neither make another's unknown TZID known nor redefine it."""
    custom = BERLIN_VTIMEZONE.replace("Europe/Berlin", "Office")
    read_busy(calendar(weekly("Office"), timezones=custom), SPRING, "UTC")
    with pytest.raises(CalendarInvalid, match="Office"):
        read_busy(calendar(weekly("Office")), SPRING, "UTC")
    # "Office" five hours ahead of UTC, then "Office" as Berlin again.
    plus_five = (
        "BEGIN:VTIMEZONE\nTZID:Office\nBEGIN:STANDARD\nDTSTART:19700101T000000\n"
        "TZOFFSETFROM:+0500\nTZOFFSETTO:+0500\nEND:STANDARD\nEND:VTIMEZONE\n"
    )
    assert spans(read_busy(calendar(weekly("Office"), timezones=plus_five), SPRING, "UTC")) == [
        hour(2030, 3, 18, 4),
        hour(2030, 3, 25, 4),
        hour(2030, 4, 1, 4),
    ]
    data = calendar(weekly("Office"), timezones=custom)
    assert spans(read_busy(data, SPRING, "UTC")) == SPRING_MONDAYS


# -- recurrence ------------------------------------------------------------------------


def test_an_exdate_removes_one_instance() -> None:
    data = calendar(weekly("Europe/Berlin", "EXDATE;TZID=Europe/Berlin:20300325T090000"))
    assert spans(read_busy(data, SPRING, "UTC")) == [hour(2030, 3, 18, 8), hour(2030, 4, 1, 7)]


def test_a_recurrence_id_moves_one_instance() -> None:
    moved = event(
        "weekly",
        "RECURRENCE-ID;TZID=Europe/Berlin:20300325T090000",
        "DTSTART;TZID=Europe/Berlin:20300326T140000",
        "DTEND;TZID=Europe/Berlin:20300326T153000",
    )
    data = calendar(weekly("Europe/Berlin"), moved)
    assert spans(read_busy(data, SPRING, "UTC")) == [
        hour(2030, 3, 18, 8),
        (z(2030, 3, 26, 13), z(2030, 3, 26, 14, 30)),
        hour(2030, 4, 1, 7),
    ]


def test_a_recurrence_id_cancelling_one_instance_frees_it() -> None:
    cancelled = event(
        "weekly",
        "RECURRENCE-ID;TZID=Europe/Berlin:20300401T090000",
        "DTSTART;TZID=Europe/Berlin:20300401T090000",
        "DTEND;TZID=Europe/Berlin:20300401T100000",
        "STATUS:CANCELLED",
    )
    data = calendar(weekly("Europe/Berlin"), cancelled)
    assert spans(read_busy(data, SPRING, "UTC")) == SPRING_MONDAYS[:2]


def test_an_rdate_adds_an_instance() -> None:
    data = calendar(weekly("Europe/Berlin", "RDATE;TZID=Europe/Berlin:20300403T160000"))
    assert spans(read_busy(data, SPRING, "UTC")) == [*SPRING_MONDAYS, hour(2030, 4, 3, 14)]


def test_an_event_that_began_long_before_the_window_is_in_it() -> None:
    data = calendar(event("trip", "DTSTART:20300310T000000Z", "DTEND:20300330T000000Z"))
    assert spans(read_busy(data, SPRING, "UTC")) == [(z(2030, 3, 10), z(2030, 3, 30))]


def test_instances_outside_the_window_are_left_out() -> None:
    data = calendar(event("late", "DTSTART:20300408T000000Z", "DTEND:20300408T010000Z"))
    assert read_busy(data, SPRING, "UTC") == []


# -- all-day and floating ------------------------------------------------------------


@pytest.mark.parametrize(
    ("timezone", "start", "end"),
    [
        ("Europe/Berlin", z(2030, 3, 19, 23), z(2030, 3, 20, 23)),
        ("America/New_York", z(2030, 3, 20, 4), z(2030, 3, 21, 4)),
        ("UTC", z(2030, 3, 20), z(2030, 3, 21)),
    ],
)
def test_an_all_day_event_blocks_the_local_day(
    timezone: str, start: datetime, end: datetime
) -> None:
    data = calendar(event("day", "DTSTART;VALUE=DATE:20300320"))
    assert spans(read_busy(data, SPRING, timezone)) == [(start, end)]


def test_a_multi_day_event_across_the_spring_change_blocks_its_local_days() -> None:
    data = calendar(
        event("away", "DTSTART;VALUE=DATE:20300330", "DTEND;VALUE=DATE:20300402", "TRANSP:OPAQUE")
    )
    # 30 March 00:00 (+01:00) to 2 April 00:00 (+02:00): 71 hours.
    assert spans(read_busy(data, SPRING, "Europe/Berlin")) == [
        (z(2030, 3, 29, 23), z(2030, 4, 1, 22))
    ]


@pytest.mark.parametrize(
    ("timezone", "start"),
    [
        ("Europe/Berlin", z(2030, 4, 2, 7)),
        ("Asia/Tokyo", z(2030, 4, 2, 0)),
        ("UTC", z(2030, 4, 2, 9)),
    ],
)
def test_floating_times_are_read_in_the_bindings_zone(timezone: str, start: datetime) -> None:
    data = calendar(event("float", "DTSTART:20300402T090000", "DTEND:20300402T100000"))
    assert spans(read_busy(data, SPRING, timezone)) == [(start, start + timedelta(hours=1))]


def test_a_binding_zone_that_is_not_a_zone_is_refused() -> None:
    with pytest.raises(CalendarInvalid, match="Not/AZone"):
        read_busy(calendar(), SPRING, "Not/AZone")


# -- what blocks ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("lines", "blocks"),
    [
        ((), True),
        (("STATUS:CONFIRMED",), True),
        (("STATUS:TENTATIVE",), True),
        (("STATUS:CANCELLED",), False),
        (("TRANSP:TRANSPARENT",), False),
        (("TRANSP:OPAQUE", "STATUS:TENTATIVE"), True),
    ],
    ids=["no-status", "confirmed", "tentative", "cancelled", "transparent", "opaque-tentative"],
)
def test_what_blocks(lines: tuple[str, ...], blocks: bool) -> None:
    data = calendar(event("e", "DTSTART:20300320T100000Z", "DTEND:20300320T110000Z", *lines))
    assert bool(read_busy(data, SPRING, "UTC")) is blocks


def test_a_zero_length_event_blocks_nothing() -> None:
    data = calendar(event("point", "DTSTART:20300320T100000Z"))
    assert read_busy(data, SPRING, "UTC") == []


def test_a_duration_sets_the_end() -> None:
    data = calendar(event("d", "DTSTART:20300320T100000Z", "DURATION:PT45M"))
    assert spans(read_busy(data, SPRING, "UTC")) == [(z(2030, 3, 20, 10), z(2030, 3, 20, 10, 45))]


def test_the_source_is_the_uid_or_the_one_given() -> None:
    data = calendar(
        event("a", "DTSTART:20300320T100000Z", "DTEND:20300320T110000Z"),
        event("b", "DTSTART:20300321T100000Z", "DTEND:20300321T110000Z"),
    )
    assert [(b.source, b.uid) for b in read_busy(data, SPRING, "UTC")] == [("a", "a"), ("b", "b")]
    href = "/calendars/ann/work/a.ics"
    assert {b.source for b in read_busy(data, SPRING, "UTC", source=href)} == {href}


# -- hostile input ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        b"garbage",
        b"\x00\xff\xfe binary",
        b"BEGIN:VEVENT\r\nUID:x\r\nEND:VEVENT\r\n",  # not a VCALENDAR
        b"BEGIN:VCALENDAR\r\nBEGIN:VEVENT\r\nEND:VCALENDAR\r\n",  # unbalanced
        calendar(event("bad", "DTSTART:notadate", "DTEND:20300320T110000Z")),
        calendar(event("bad", "DTSTART:20300320T100000Z", "RRULE:FREQ=SOMETIMES")),
        calendar(event("bad", "DTSTART:20300320T100000Z", "RRULE:FREQ=DAILY;COUNT=99999999999")),
        calendar(event("no-start", "DTEND:20300320T110000Z")),
        calendar(event("no-start", "RRULE:FREQ=DAILY")),
        calendar(event("e", "DTSTART:20300320T100000Z"), timezones="CALSCALE:JULIAN\n"),
        calendar(
            event("e", "DTSTART;TZID=Foo:20300320T100000"),
            timezones="BEGIN:VTIMEZONE\n"
            "TZID:Foo\nBEGIN:STANDARD\nDTSTART:garbage\nTZOFFSETFROM:+0100\n"
            "TZOFFSETTO:+0100\nEND:STANDARD\nEND:VTIMEZONE\n",
        ),
        calendar() + calendar(),
    ],
    ids=[
        "garbage",
        "binary",
        "no-vcalendar",
        "unbalanced",
        "bad-dtstart",
        "bad-rrule",
        "rrule-count-out-of-range",
        "no-dtstart",
        "no-dtstart-recurring",
        "not-gregorian",
        "broken-vtimezone",
        "two-calendars",
    ],
)
def test_data_that_does_not_parse_is_invalid(data: bytes) -> None:
    with pytest.raises(CalendarInvalid):
        read_busy(data, SPRING, "UTC")


def test_a_parse_error_quotes_no_data() -> None:
    """A file URL's data may be any file of the server's: the message shows none of it."""
    with pytest.raises(CalendarInvalid) as caught:
        read_busy(b"root:secret-hash:19000:0:99999:7:::\n", SPRING, "UTC")
    assert "secret-hash" not in str(caught.value)
    assert "root" not in str(caught.value)


def test_data_past_the_cap_is_refused_before_parsing() -> None:
    # Not iCalendar at all: a parse would refuse it as unreadable; the size check
    # comes first, so the refusal names the size.
    with pytest.raises(CalendarInvalid, match="larger than"):
        read_busy(b"X" * (MAX_BYTES + 1), SPRING, "UTC")
    with pytest.raises(CalendarInvalid) as unreadable:
        read_busy(b"X" * MAX_BYTES, SPRING, "UTC")
    assert "larger than" not in str(unreadable.value)


def test_too_many_instances_in_the_window_are_refused_fast() -> None:
    data = calendar(
        event("m", "DTSTART:20300318T000000Z", "DTEND:20300318T000100Z", "RRULE:FREQ=MINUTELY")
    )
    sixty_days = Window(z(2030, 3, 18), z(2030, 5, 17))  # 84,960 minutes
    budget = Budget()
    with pytest.raises(CalendarInvalid, match="too many events"):
        read_busy(data, sixty_days, "UTC", budget=budget)
    # Refused at the first instance past the cap, not after making all 84,960
    # (the work is bounded by the cap, whatever the window holds).
    assert budget.instances == -1


def test_the_caps_hold_for_a_whole_read_not_each_resource_of_it() -> None:
    """A CalDAV collection is parsed resource by resource: many small dense
    resources must not each get the caps anew."""
    hourly = calendar(
        event("h", "DTSTART:20300318T000000Z", "DTEND:20300318T000100Z", "RRULE:FREQ=HOURLY")
    )
    two_days = Window(z(2030, 3, 18), z(2030, 3, 20))  # 48 instances per resource
    alone = Budget()
    read_busy(hourly, two_days, "UTC", budget=alone)
    spent = MAX_INSTANCES - alone.instances  # the expansion looks a little past the window
    assert spent >= 48
    budget = Budget(instances=2 * spent + spent // 2)
    assert len(read_busy(hourly, two_days, "UTC", source="/a.ics", budget=budget)) == 48
    assert len(read_busy(hourly, two_days, "UTC", source="/b.ics", budget=budget)) == 48
    with pytest.raises(CalendarInvalid, match="too many events"):
        read_busy(hourly, two_days, "UTC", source="/c.ics", budget=budget)
    assert Budget().instances == MAX_INSTANCES  # a read of its own starts afresh


@pytest.mark.parametrize(
    "rule",
    [
        "FREQ=SECONDLY",
        "FREQ=MINUTELY;INTERVAL=1",
        "FREQ=SECONDLY;BYMONTH=2;BYMONTHDAY=30",  # never happens: would iterate to year 9999
        "FREQ=YEARLY;BYHOUR=0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23;"
        "BYMINUTE=0,5,10,15,20,25,30,35,40,45,50,55;BYDAY=MO",
    ],
)
def test_a_recurrence_too_dense_to_expand_is_refused_without_expanding_it(rule: str) -> None:
    data = calendar(event("dense", "DTSTART:19000101T000000Z", "DURATION:PT1S", f"RRULE:{rule}"))
    budget = Budget()
    with pytest.raises(CalendarInvalid, match="too dense"):
        read_busy(data, SPRING, "UTC", budget=budget)
    assert budget.instances == MAX_INSTANCES  # estimated and refused: not one instance made


def test_a_long_running_daily_event_is_expanded() -> None:
    data = calendar(
        event(
            "standup",
            "DTSTART;TZID=Europe/Berlin:19700101T093000",
            "DTEND;TZID=Europe/Berlin:19700101T094500",
            "RRULE:FREQ=DAILY;BYDAY=MO,TU,WE,TH,FR",
        )
    )
    assert len(read_busy(data, SPRING, "UTC")) == 15


# -- slotward's own event ---------------------------------------------------------------------


EVENT = CalendarEvent(
    uid="hold_01J@slotward",
    start=datetime(2030, 3, 31, 9, 30, tzinfo=UTC),
    end=datetime(2030, 3, 31, 10, 0, tzinfo=UTC),
    summary="Interview, round 2",
    description="Held by slotward; line two, with a comma",
    status="TENTATIVE",
    sequence=3,
)


def test_a_rendered_event_reads_back_as_its_own_busy_time() -> None:
    data = render_event(EVENT, datetime(2030, 3, 1, 12, tzinfo=UTC))
    assert read_busy(data, SPRING, "Europe/Berlin") == [
        Busy(source=EVENT.uid, uid=EVENT.uid, start=EVENT.start, end=EVENT.end)
    ]


def test_a_rendered_event_says_what_a_calendar_needs() -> None:
    text = render_event(EVENT, datetime(2030, 3, 1, 12, tzinfo=UTC)).decode()
    lines = text.split("\r\n")
    for expected in (
        "PRODID:-//slotward//EN",
        "VERSION:2.0",
        "UID:hold_01J@slotward",
        "DTSTAMP:20300301T120000Z",
        "DTSTART:20300331T093000Z",
        "DTEND:20300331T100000Z",
        "SUMMARY:Interview\\, round 2",
        "STATUS:TENTATIVE",
        "SEQUENCE:3",
        "TRANSP:OPAQUE",
    ):
        assert expected in lines
    assert lines.count("BEGIN:VEVENT") == 1


def test_a_confirmed_event_in_another_zone_is_rendered_in_utc() -> None:
    berlin = ZoneInfo("Europe/Berlin")
    confirmed = CalendarEvent(
        uid="hold_2@slotward",
        start=datetime(2030, 7, 1, 9, tzinfo=UTC).astimezone(berlin),
        end=datetime(2030, 7, 1, 10, tzinfo=UTC).astimezone(berlin),
        summary="s",
        description="",
        status="CONFIRMED",
        sequence=0,
    )
    data = render_event(confirmed, datetime(2030, 3, 1, tzinfo=UTC))
    assert b"DTSTART:20300701T090000Z" in data
    assert b"STATUS:CONFIRMED" in data


def test_an_unknown_tzid_in_an_rdate_period_is_refused() -> None:
    data = calendar(weekly("Europe/Berlin", "RDATE;VALUE=PERIOD;TZID=Nowhere:20300403T160000/PT1H"))
    with pytest.raises(CalendarInvalid, match="Nowhere"):
        read_busy(data, SPRING, "Europe/Berlin")


def test_an_rdate_period_blocks_its_period() -> None:
    data = calendar(
        weekly("Europe/Berlin", "RDATE;VALUE=PERIOD;TZID=Europe/Berlin:20300403T160000/PT2H")
    )
    assert spans(read_busy(data, SPRING, "UTC"))[-1] == (z(2030, 4, 3, 14), z(2030, 4, 3, 16))
