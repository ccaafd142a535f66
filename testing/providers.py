"""The conformance kit for calendar adapters: one pytest suite every adapter passes.

As SQLAlchemy's dialect suite is for dialects, this is for calendar
providers (slotward's own, and third-party ones under the entry point group
``slotward.providers``): subclass :class:`ProviderConformance` in a test
module and define two fixtures, ``provider`` (the adapter under test, a
``CalendarProvider``; close it in the fixture's teardown) and ``harness``
(a :class:`CalendarHarness` over a real, empty calendar that the adapter's
connection points at; a fresh one per test)::

    import pytest
    from slotward.testing.providers import ProviderConformance

    class TestMyCalendar(ProviderConformance):
        @pytest.fixture
        async def provider(self):
            adapter = my_factory(ProviderSettings(allow_private_urls=True))
            yield adapter
            await adapter.close()

        @pytest.fixture
        async def harness(self, my_server):
            return MyHarness(await my_server.new_calendar())

It needs pytest and pytest-asyncio (the tests are marked ``asyncio``; under
pytest-asyncio's strict mode declare async fixtures with
``pytest_asyncio.fixture``). docs/providers-kit.md walks through a whole
adapter. Writing tests skip, saying why, for an adapter whose
``capabilities.writes`` is False; the incremental one for an adapter that
does not read incrementally.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Protocol

import pytest

from slotward.engine.calendars import (
    Busy,
    BusyRead,
    CalendarEvent,
    Connection,
    EventStatus,
    Window,
)
from slotward.engine.provider_ports import CalendarProvider
from slotward.engine.rules.calendar_events import event_uid, is_own
from slotward.testing.provider_cases import (
    Span,
    dst_series,
    recurrence,
    statuses,
    vcalendar,
    vevent,
)

__all__ = ["CalendarHarness", "ProviderConformance", "apply_read", "spans_of"]


class CalendarHarness(Protocol):
    """The calendar behind an adapter, reached without slotward.

    ``connection`` is what the adapter is handed (its URL, credentials and time
    zone) for a calendar that is empty when the test begins. ``add_external``
    puts one VCALENDAR text (one event, with its overrides and time zones)
    into it as another calendar client would; ``remove_external`` removes the
    event of that UID. ``events`` lists what the calendar holds now: one
    ``(uid, status)`` per event (the master's ``STATUS``, ``""`` when it has
    none). A read-only calendar (an ICS file) implements them by rewriting and
    reading its file.
    """

    @property
    def connection(self) -> Connection: ...

    async def add_external(self, ics: str) -> None: ...

    async def remove_external(self, uid: str) -> None: ...

    async def events(self) -> list[tuple[str, str]]: ...


Mirror = dict[str, tuple[Busy, ...]]


def apply_read(mirror: Mirror, read: BusyRead) -> Mirror:
    """The mirror (blocks by source) after ``read``, as slotward keeps it."""
    if read.unchanged:
        return dict(mirror)
    if read.full:
        replaced: dict[str, list[Busy]] = {}
        for block in read.busy:
            replaced.setdefault(block.source, []).append(block)
        return {source: tuple(blocks) for source, blocks in replaced.items()}
    patched = {source: blocks for source, blocks in mirror.items() if source not in read.removed}
    for source in read.changed:
        patched[source] = tuple(block for block in read.busy if block.source == source)
    return {source: blocks for source, blocks in patched.items() if blocks}


def spans_of(blocks: Iterable[Busy], uid: str) -> set[Span]:
    """The UTC spans of ``uid``'s blocks."""
    return {(b.start.astimezone(UTC), b.end.astimezone(UTC)) for b in blocks if b.uid == uid}


def _all(mirror: Mirror) -> list[Busy]:
    return [block for blocks in mirror.values() for block in blocks]


_START = datetime(2030, 6, 3, 10, tzinfo=UTC)
_WEEK = Window(_START - timedelta(days=2), _START + timedelta(days=7))


def _own_event(status: EventStatus = "TENTATIVE", sequence: int = 1) -> CalendarEvent:
    return CalendarEvent(
        uid=event_uid("hold_kit1"),
        start=_START,
        end=_START + timedelta(minutes=30),
        summary="Held by slotward",
        description="The conformance kit's event.",
        status=status,
        sequence=sequence,
    )


def _external(uid: str, hours: int = 2) -> str:
    begin = _START + timedelta(hours=hours)
    return vcalendar(vevent(uid, begin, begin + timedelta(hours=1), status="CONFIRMED"))


def _needs_writes(provider: CalendarProvider) -> None:
    if not provider.capabilities.writes:
        pytest.skip(f"{provider.name} does not write (capabilities.writes is False)")


async def _full_read(
    provider: CalendarProvider, harness: CalendarHarness, window: Window
) -> BusyRead:
    read = await provider.busy(harness.connection, window, None)
    assert read.full, "a read without a cursor reads everything in the window (full=True)"
    for block in read.busy:
        assert block.start.tzinfo is not None, f"a naive time: {block}"
        assert block.end.tzinfo is not None, f"a naive time: {block}"
        assert block.start < block.end, block
    return read


@pytest.mark.asyncio
class ProviderConformance:
    """The suite. Subclass it as ``Test<Something>`` and define the fixtures
    ``provider`` and ``harness`` (see the module's docstring)."""

    async def test_describes_itself(self, provider: CalendarProvider) -> None:
        assert isinstance(provider.name, str)
        assert provider.name
        caps = provider.capabilities
        assert caps.schemes, "no URL scheme a binding could use"
        assert all(s == s.lower() for s in caps.schemes), caps.schemes
        assert isinstance(caps.writes, bool)
        assert isinstance(caps.incremental, bool)

    async def test_an_empty_calendar_is_free(
        self, provider: CalendarProvider, harness: CalendarHarness
    ) -> None:
        read = await _full_read(provider, harness, _WEEK)
        assert read.busy == ()

    async def test_put_twice_is_one_event(
        self, provider: CalendarProvider, harness: CalendarHarness
    ) -> None:
        _needs_writes(provider)
        event = _own_event()
        first = await provider.put_event(harness.connection, event)
        again = await provider.put_event(harness.connection, event)
        assert first.ok, first
        assert again.ok, f"a put repeated (a redelivery) answers ok too: {again}"
        assert await harness.events() == [(event.uid, "TENTATIVE")]
        read = await _full_read(provider, harness, _WEEK)
        assert spans_of(read.busy, event.uid) <= {(event.start, event.end)}

    async def test_a_newer_put_updates_the_event(
        self, provider: CalendarProvider, harness: CalendarHarness
    ) -> None:
        _needs_writes(provider)
        held = await provider.put_event(harness.connection, _own_event("TENTATIVE", 1))
        booked = await provider.put_event(harness.connection, _own_event("CONFIRMED", 2))
        assert held.ok, held
        assert booked.ok, booked
        assert await harness.events() == [(event_uid("hold_kit1"), "CONFIRMED")]

    async def test_delete_twice_is_gone_and_ok(
        self, provider: CalendarProvider, harness: CalendarHarness
    ) -> None:
        _needs_writes(provider)
        event = _own_event()
        assert (await provider.put_event(harness.connection, event)).ok
        first = await provider.delete_event(harness.connection, event.uid)
        again = await provider.delete_event(harness.connection, event.uid)
        never = await provider.delete_event(harness.connection, event_uid("hold_never"))
        assert first.ok, first
        assert again.ok, f"deleting an event already gone is ok: {again}"
        assert never.ok, f"deleting an event never written is ok: {never}"
        assert await harness.events() == []

    async def test_busy_across_dst_is_the_local_time(
        self, provider: CalendarProvider, harness: CalendarHarness
    ) -> None:
        case = dst_series()
        await harness.add_external(case.ics)
        read = await _full_read(provider, harness, case.window)
        found = spans_of(read.busy, case.uid)
        assert found == case.spans, (
            f"missing {sorted(case.spans - found)[:3]}, extra {sorted(found - case.spans)[:3]}"
        )

    async def test_recurrence_with_exdate_and_override(
        self, provider: CalendarProvider, harness: CalendarHarness
    ) -> None:
        case = recurrence()
        await harness.add_external(case.ics)
        read = await _full_read(provider, harness, case.window)
        assert spans_of(read.busy, case.uid) == case.spans

    async def test_transparent_and_cancelled_do_not_block_tentative_does(
        self, provider: CalendarProvider, harness: CalendarHarness
    ) -> None:
        window, texts, blocking = statuses()
        for text in texts.values():
            await harness.add_external(text)
        read = await _full_read(provider, harness, window)
        assert {block.uid for block in read.busy} == blocking

    async def test_own_events_are_not_external(
        self, provider: CalendarProvider, harness: CalendarHarness
    ) -> None:
        own = _own_event()
        if provider.capabilities.writes:
            assert (await provider.put_event(harness.connection, own)).ok
        else:  # an event slotward wrote through another route: the same UID
            await harness.add_external(vcalendar(vevent(own.uid, own.start, own.end)))
        await harness.add_external(_external("kit-external@example.com", hours=0))
        read = await _full_read(provider, harness, _WEEK)
        external = [block for block in read.busy if not is_own(block.uid)]
        assert spans_of(external, "kit-external@example.com") == {
            (_START, _START + timedelta(hours=1))
        }
        assert [b.uid for b in external if b.uid != "kit-external@example.com"] == [], (
            "slotward's own event was read under another UID: it would block its own hold"
        )

    async def test_reads_with_the_cursor_follow_changes(
        self, provider: CalendarProvider, harness: CalendarHarness
    ) -> None:
        """What the sync worker does: every read hands back the last cursor."""
        await harness.add_external(_external("kit-stays@example.com", hours=0))
        first = await _full_read(provider, harness, _WEEK)
        mirror = apply_read({}, first)
        await harness.add_external(_external("kit-comes@example.com", hours=3))
        added = await provider.busy(harness.connection, _WEEK, first.cursor)
        mirror = apply_read(mirror, added)
        assert spans_of(_all(mirror), "kit-comes@example.com"), "the added event is not seen"
        await harness.remove_external("kit-comes@example.com")
        removed = await provider.busy(harness.connection, _WEEK, added.cursor)
        mirror = apply_read(mirror, removed)
        assert not spans_of(_all(mirror), "kit-comes@example.com"), "the removed event stays"
        assert spans_of(_all(mirror), "kit-stays@example.com"), "the untouched event is lost"
        same = await provider.busy(harness.connection, _WEEK, removed.cursor)
        assert same.unchanged or apply_read(mirror, same) == mirror
        if same.unchanged:
            assert same.busy == (), "an unchanged read carries no blocks"

    async def test_incremental_reads_report_changes(
        self, provider: CalendarProvider, harness: CalendarHarness
    ) -> None:
        if not provider.capabilities.incremental:
            pytest.skip(f"{provider.name} does not read incrementally (capabilities.incremental)")
        first = await _full_read(provider, harness, _WEEK)
        await harness.add_external(_external("kit-comes@example.com"))
        added = await provider.busy(harness.connection, _WEEK, first.cursor)
        assert not added.unchanged, "the added event is not reported"
        assert spans_of(added.busy, "kit-comes@example.com"), "the added event is not reported"
        if not added.full:
            sources = {b.source for b in added.busy}
            assert sources <= set(added.changed), "blocks of a source not named as changed"
        await harness.remove_external("kit-comes@example.com")
        removed = await provider.busy(harness.connection, _WEEK, added.cursor)
        assert not removed.unchanged, "the removal is not reported"
        if removed.full:
            assert not spans_of(removed.busy, "kit-comes@example.com")
        else:
            gone = {b.source for b in added.busy if b.uid == "kit-comes@example.com"}
            reported = set(removed.removed) | (
                set(removed.changed) - {b.source for b in removed.busy}
            )
            assert gone <= reported, f"the removal of {gone} is not reported: {removed}"
        mirror = apply_read(apply_read(apply_read({}, first), added), removed)
        same = await provider.busy(harness.connection, _WEEK, removed.cursor)
        assert same.unchanged or apply_read(mirror, same) == mirror, same
