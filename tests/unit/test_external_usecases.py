"""External busy time in decisions, the mirror's sync and the calendar writes, on the fakes.

Time moves only when a test advances the clock. A binding is stored as an
admin's PUT would store it; a read of a calendar is a BusyRead handed to the
sync use case, as api/providers.py hands it over after reading the provider.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from slotward.engine.calendars import (
    Busy,
    BusyRead,
    CalendarBinding,
    CalendarInvalid,
    ProviderUnreachable,
    Window,
)
from slotward.engine.clock import FixedClock
from slotward.engine.errors import SlotConflict
from slotward.engine.fakes import InMemoryUnitOfWork, SequentialIds, State
from slotward.engine.model import Principal, Reply
from slotward.engine.rules.attendees import attendee_id_for_email, parse_attendees
from slotward.engine.rules.calendar_events import event_uid
from slotward.engine.rules.delivery import Outcome, RelaySettings
from slotward.engine.rules.external import ExternalPolicy, NeedsRefresh
from slotward.engine.rules.policy import Policy
from slotward.engine.rules.timenorm import normalize_interval
from slotward.engine.usecases.calendar_writes import (
    WriteResult,
    claim_writes,
    fan_out_writes,
    record_writes,
)
from slotward.engine.usecases.lifecycle import HoldAction, commit_hold, release_hold
from slotward.engine.usecases.placing import HoldRequest, place_hold
from slotward.engine.usecases.provider_sync import (
    MAX_BACKOFF,
    claim_syncs,
    read_window,
    store_failure,
    store_read,
)
from slotward.engine.usecases.reads import AvailabilityQuery, availability

T0 = datetime(2030, 10, 1, 9, 0, tzinfo=UTC)
TENANT = "acme"
ALICE = Principal(TENANT, "agent-alice", "agent", 50)
BOB_EMAIL = "bob@example.com"
BOB = attendee_id_for_email(TENANT, BOB_EMAIL)
POLICY = ExternalPolicy(max_staleness=timedelta(seconds=60), horizon=timedelta(days=60))
INTERVAL = timedelta(seconds=30)
SETTINGS = RelaySettings(schedule=(0.0, 10.0, 60.0), timeout=5.0)


def at(text: str) -> datetime:
    return datetime.fromisoformat(text)


@dataclass
class World:
    state: State = field(default_factory=State)
    clock: FixedClock = field(default_factory=lambda: FixedClock(T0))
    ids: SequentialIds = field(default_factory=SequentialIds)
    policy: Policy = field(default_factory=Policy)

    def uow(self) -> InMemoryUnitOfWork:
        return InMemoryUnitOfWork(self.state)

    def bind(self, attendee: str = BOB, **fields: Any) -> CalendarBinding:
        now = self.clock.now()
        binding = CalendarBinding(
            tenant=TENANT,
            attendee=attendee,
            provider=fields.pop("provider", "caldav"),
            url="https://cal.example.com/bob/",
            created_at=now,
            updated_at=now,
            **fields,
        )
        with self.uow() as uow:
            uow.calendars.put(binding)
            uow.commit()
        return binding

    def binding(self, attendee: str = BOB) -> CalendarBinding:
        with self.uow() as uow:
            found = uow.calendars.get(TENANT, attendee)
        assert found is not None
        return found

    def read(self, *busy: Busy, full: bool = True, **fields: Any) -> CalendarBinding | None:
        binding = self.binding()
        now = self.clock.now()
        window = read_window(binding, now, POLICY)
        found = BusyRead(full=full, busy=busy, **fields)
        return store_read(self.uow(), binding, now, window, found, INTERVAL)

    def place(self, external: ExternalPolicy | None = POLICY, **kw: Any) -> Reply:
        return place_hold(self.uow(), request(**kw), self.policy, self.clock, self.ids, external)

    def mirror(self, attendee: str = BOB) -> list[tuple[str, datetime, datetime]]:
        with self.uow() as uow:
            blocks = uow.mirror.overlapping(TENANT, [attendee], T0 - timedelta(days=9),
                                            T0 + timedelta(days=90))  # fmt: skip
        return [(b.source, b.start, b.end) for b in blocks]


def request(
    start: str = "2030-10-01T10:00:00Z", minutes: int = 30, workflow: str = "wf-1"
) -> HoldRequest:
    return HoldRequest(
        principal=ALICE,
        workflow_id=workflow,
        step=None,
        attendees=parse_attendees([BOB_EMAIL]),
        interval=normalize_interval(start=start, duration_minutes=minutes),
        title="Sync",
        description=None,
        priority=50,
        ttl_seconds=300,
    )


def busy(start: str, end: str, source: str = "/cal/ext.ics", uid: str = "ext-1") -> Busy:
    return Busy(source, uid, at(start), at(end))


def body(reply: Reply) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(reply.body)
    return out


@pytest.fixture
def world() -> World:
    return World()


# -- decisions ----------------------------------------------------------------


def test_an_unbound_attendee_decides_without_external_time(world: World) -> None:
    reply = world.place()
    assert reply.created
    assert "external_as_of" not in body(reply)


def test_a_never_read_binding_asks_for_a_refresh_and_writes_nothing(world: World) -> None:
    world.bind()
    before = (dict(world.state.holds), dict(world.state.audit))
    with pytest.raises(NeedsRefresh) as raised:
        world.place()
    assert [b.attendee for b in raised.value.bindings] == [BOB]
    assert raised.value.window == Window(at("2030-10-01T10:00:00Z"), at("2030-10-01T10:30:00Z"))
    assert (dict(world.state.holds), dict(world.state.audit)) == before


def test_external_time_refuses_a_claim_as_external(world: World) -> None:
    world.bind()
    world.read(busy("2030-10-01T10:15:00+00:00", "2030-10-01T11:00:00+00:00"))
    with pytest.raises(SlotConflict) as raised:
        world.place()
    extra = raised.value.extra
    assert extra["conflicts"] == [
        {"attendee": BOB, "start": "2030-10-01T10:15:00Z", "end": "2030-10-01T11:00:00Z",
         "kind": "external"},
    ]  # fmt: skip
    assert raised.value.retryable is False
    assert raised.value.retry_after is None
    assert extra["external_as_of"] == "2030-10-01T09:00:00Z"
    # The alternatives keep clear of the external meeting too.
    for alt in extra["alternatives"]:
        start, end = at(alt["start"]), at(alt["end"])
        assert end <= at("2030-10-01T10:15:00+00:00") or start >= at("2030-10-01T11:00:00+00:00")


def test_a_fresh_mirror_without_overlap_lets_the_claim_land_and_says_how_old(
    world: World,
) -> None:
    world.bind()
    world.read(busy("2030-10-01T11:00:00+00:00", "2030-10-01T12:00:00+00:00"))
    world.clock.advance(20)
    reply = world.place()
    assert reply.created
    assert body(reply)["external_as_of"] == "2030-10-01T09:00:00Z"
    assert "external_stale" not in body(reply)


def test_a_mirror_older_than_the_bound_asks_again_until_refreshed(world: World) -> None:
    world.bind()
    world.read()
    world.clock.advance(61)
    with pytest.raises(NeedsRefresh):
        world.place()
    refreshed = replace(POLICY, refreshed=frozenset({BOB}))
    assert world.place(external=refreshed).created


def test_last_known_decides_on_the_mirror_and_says_it_is_stale(world: World) -> None:
    world.bind(on_unavailable="last_known")
    world.read(busy("2030-10-01T10:00:00+00:00", "2030-10-01T10:30:00+00:00"))
    world.clock.advance(300)
    unreachable = replace(POLICY, unreachable=frozenset({BOB}))
    with pytest.raises(SlotConflict) as raised:
        world.place(external=unreachable)
    assert raised.value.extra["external_stale"] is True
    reply = world.place(external=unreachable, start="2030-10-01T12:00:00Z")
    assert body(reply)["external_stale"] is True


def test_a_claim_beyond_the_mirror_window_asks_for_a_refresh(world: World) -> None:
    world.bind()
    world.read()
    with pytest.raises(NeedsRefresh):
        world.place(start="2031-03-01T10:00:00Z")
    # Refreshed, but by a read whose window still ends before the claim (a race
    # lost to the sync worker's ordinary read): still not decided on.
    refreshed = replace(POLICY, refreshed=frozenset({BOB}))
    with pytest.raises(NeedsRefresh):
        world.place(external=refreshed, start="2031-03-01T10:00:00Z")


def test_a_commit_meets_external_time_put_in_the_calendar_since(world: World) -> None:
    world.bind()
    world.read()
    reply = world.place()
    hold = body(reply)
    world.read(busy("2030-10-01T10:00:00+00:00", "2030-10-01T10:30:00+00:00"))
    action = HoldAction(ALICE, hold["id"], token=hold["token"])
    with pytest.raises(SlotConflict) as raised:
        commit_hold(world.uow(), action, world.policy, world.clock, world.ids, POLICY)
    assert [c["kind"] for c in raised.value.extra["conflicts"]] == ["external"]
    assert world.state.holds[(TENANT, hold["id"])].status.value == "held"
    # Freed in the calendar, the commit goes through and says how old the read was.
    world.read()
    done = commit_hold(world.uow(), action, world.policy, world.clock, world.ids, POLICY)
    assert body(done)["status"] == "committed"
    assert body(done)["external_as_of"] == "2030-10-01T09:00:00Z"


def test_availability_shows_external_busy_time(world: World) -> None:
    world.bind()
    world.read(busy("2030-10-01T10:00:00+00:00", "2030-10-01T10:30:00+00:00"))
    query = AvailabilityQuery(
        principal=ALICE,
        attendees=parse_attendees([BOB_EMAIL]),
        start=at("2030-10-01T09:30:00+00:00"),
        end=at("2030-10-01T11:00:00+00:00"),
        duration=timedelta(minutes=30),
        limit=5,
    )
    found = availability(world.uow(), query, world.policy, world.clock.now(), POLICY)
    assert found["busy"] == [
        {"attendee": BOB, "start": "2030-10-01T10:00:00Z", "end": "2030-10-01T10:30:00Z",
         "kind": "external"},
    ]  # fmt: skip
    assert {"start": "2030-10-01T10:00:00Z", "end": "2030-10-01T10:30:00Z"} not in found["slots"]
    assert found["external_as_of"] == "2030-10-01T09:00:00Z"


# -- the mirror ---------------------------------------------------------------


def test_own_events_never_enter_the_mirror(world: World) -> None:
    world.bind()
    own = busy("2030-10-01T10:00:00+00:00", "2030-10-01T10:30:00+00:00", "/cal/h.ics",
               event_uid("hold_7"))  # fmt: skip
    world.read(own, busy("2030-10-01T12:00:00+00:00", "2030-10-01T13:00:00+00:00"))
    assert [source for source, _, _ in world.mirror()] == ["/cal/ext.ics"]


def test_an_incremental_read_replaces_and_removes_sources(world: World) -> None:
    world.bind()
    world.read(
        busy("2030-10-01T10:00:00+00:00", "2030-10-01T11:00:00+00:00", "/a.ics", "a"),
        busy("2030-10-02T10:00:00+00:00", "2030-10-02T11:00:00+00:00", "/b.ics", "b"),
        cursor="t1",
    )
    world.read(
        busy("2030-10-03T10:00:00+00:00", "2030-10-03T11:00:00+00:00", "/a.ics", "a"),
        full=False, changed=("/a.ics", "/c.ics"), removed=("/b.ics",), cursor="t2",
    )  # fmt: skip
    assert world.mirror() == [
        ("/a.ics", at("2030-10-03T10:00:00+00:00"), at("2030-10-03T11:00:00+00:00"))
    ]
    assert world.binding().cursor == "t2"


def test_an_unchanged_read_keeps_the_mirror_and_freshens_it(world: World) -> None:
    world.bind()
    world.read(busy("2030-10-01T10:00:00+00:00", "2030-10-01T11:00:00+00:00"), cursor="e1")
    world.clock.advance(45)
    world.read(unchanged=True, cursor="e1")
    binding = world.binding()
    assert binding.synced_at == T0 + timedelta(seconds=45)
    assert len(world.mirror()) == 1


def test_two_reads_racing_store_once(world: World) -> None:
    world.bind()
    first = world.binding()
    now = world.clock.now()
    window = read_window(first, now, POLICY)
    one = BusyRead(
        full=True, busy=(busy("2030-10-01T10:00:00+00:00", "2030-10-01T11:00:00+00:00"),)
    )
    two = BusyRead(full=True)
    assert store_read(world.uow(), first, now, window, one, INTERVAL) is not None
    assert store_read(world.uow(), first, now, window, two, INTERVAL) is None  # lost
    assert len(world.mirror()) == 1


def test_a_failed_read_keeps_the_mirror_and_backs_off(world: World) -> None:
    world.bind()
    world.read(busy("2030-10-01T10:00:00+00:00", "2030-10-01T11:00:00+00:00"))
    now = world.clock.now()
    waits = []
    for _ in range(8):
        binding = world.binding()
        stored = store_failure(world.uow(), binding, now, ProviderUnreachable("refused"), INTERVAL)
        assert stored is not None
        assert (stored.status, stored.error) == ("error", "refused")
        assert stored.next_sync_at is not None
        waits.append(stored.next_sync_at - now)
    assert waits[:3] == [INTERVAL, INTERVAL * 2, INTERVAL * 4]
    assert waits[-1] == MAX_BACKOFF
    assert len(world.mirror()) == 1
    binding = world.binding()
    invalid = CalendarInvalid("unknown TZID 'Mars/Olympus'")
    stored = store_failure(world.uow(), binding, now, invalid, INTERVAL)
    assert stored is not None
    assert "Mars/Olympus" in (stored.error or "")


def test_the_window_moves_once_a_day_not_on_every_read(world: World) -> None:
    world.bind()
    world.read()
    first = world.binding()
    world.clock.advance(21600)
    assert read_window(first, world.clock.now(), POLICY) == Window(
        first.covers_from or T0, first.covers_until or T0
    )
    world.clock.advance(172800)
    moved = read_window(first, world.clock.now(), POLICY)
    assert moved.end > (first.covers_until or T0)


def test_a_window_a_far_claim_stretched_shrinks_back(world: World) -> None:
    world.bind()
    world.read()
    far = Window(at("2031-06-01T10:00:00+00:00"), at("2031-06-01T11:00:00+00:00"))
    stretched = read_window(world.binding(), world.clock.now(), POLICY, far)
    assert stretched.end == at("2031-06-02T00:00:00+00:00")  # to the end of its day
    binding = replace(world.binding(), covers_from=stretched.start, covers_until=stretched.end)
    assert read_window(binding, world.clock.now(), POLICY, far) == stretched  # reused for it
    ordinary = read_window(binding, world.clock.now(), POLICY)
    assert ordinary.end < far.start  # not kept for every read to come
    world.clock.advance(5 * 86400)  # nor a window begun days ago
    assert read_window(binding, world.clock.now(), POLICY, far).start > stretched.start


def test_due_bindings_are_claimed_once(world: World) -> None:
    world.bind()
    lease = timedelta(seconds=40)
    assert [b.attendee for b in claim_syncs(world.uow(), world.clock, "a", lease, 10)] == [BOB]
    assert claim_syncs(world.uow(), world.clock, "b", lease, 10) == []
    world.clock.advance(lease.total_seconds())
    assert [b.attendee for b in claim_syncs(world.uow(), world.clock, "b", lease, 10)] == [BOB]


# -- calendar writes -----------------------------------------------------------


def _events(world: World) -> list[Any]:
    return sorted(world.state.outbox, key=lambda e: (e.seq or 0, e.id))


def fan_out(world: World, writable: tuple[str, ...] = ("caldav",)) -> int:
    """The relay's fan-out of every event so far (it runs in the relay's transaction)."""
    with world.uow() as uow:
        made = fan_out_writes(uow, _events(world), world.clock.now(), writable)
        uow.commit()
    return made


def test_each_transition_asks_the_calendar_for_the_latest_state(world: World) -> None:
    world.bind()
    world.read()
    hold = body(world.place())
    assert fan_out(world) == 1
    claimed = claim_writes(world.uow(), world.clock, "w", timedelta(seconds=30), 10)
    assert [(w.action, w.status, w.uid) for w, _ in claimed] == [
        ("put", "TENTATIVE", event_uid(hold["id"]))
    ]
    write, binding = claimed[0]
    assert binding.attendee == BOB
    assert "agent-alice" in write.description
    assert write.summary == "Sync"
    # Released while the put was in flight: the put is superseded, the delete waits.
    release_hold(world.uow(), HoldAction(ALICE, hold["id"]), world.policy, world.clock, world.ids)
    fan_out(world)
    result = WriteResult(write.key, write.version, world.clock.now(), Outcome(201, None))
    done = record_writes(world.uow(), world.clock, "w", [result], SETTINGS, lambda: 0.5)
    assert done.superseded == 1
    again = claim_writes(world.uow(), world.clock, "w", timedelta(seconds=30), 10)
    assert [(w.action, w.version) for w, _ in again] == [("delete", 2)]
    ok = WriteResult(again[0][0].key, 2, world.clock.now(), Outcome(204, None))
    assert record_writes(world.uow(), world.clock, "w", [ok], SETTINGS, lambda: 0.5).written == 1
    with world.uow() as uow:
        assert uow.calendar_writes.counts(TENANT, BOB) == {"delivered": 1}


def test_a_read_only_provider_gets_no_writes(world: World) -> None:
    world.bind(provider="ics")
    world.read()
    world.place()
    assert fan_out(world) == 0


def test_a_failing_write_follows_the_schedule_then_dies(world: World) -> None:
    world.bind()
    world.read()
    world.place()
    fan_out(world)
    lease = timedelta(seconds=30)
    for n, wait in enumerate((10.0, 60.0, None)):
        claimed = claim_writes(world.uow(), world.clock, "w", lease, 10)
        assert len(claimed) == 1, n
        write = claimed[0][0]
        failed = WriteResult(write.key, write.version, world.clock.now(), Outcome(503, "busy"))
        record_writes(world.uow(), world.clock, "w", [failed], SETTINGS, lambda: 0.5)
        if wait is not None:
            assert claim_writes(world.uow(), world.clock, "w", lease, 10) == []
            world.clock.advance(wait)
    with world.uow() as uow:
        assert uow.calendar_writes.counts(TENANT, BOB) == {"dead": 1}


def test_a_decisions_read_keeps_what_another_far_claim_stretched(world: World) -> None:
    world.bind()
    world.read()
    later = Window(at("2031-06-02T10:00:00+00:00"), at("2031-06-02T11:00:00+00:00"))
    earlier = Window(at("2031-06-01T10:00:00+00:00"), at("2031-06-01T11:00:00+00:00"))
    stretched = read_window(world.binding(), world.clock.now(), POLICY, later)
    binding = replace(world.binding(), covers_from=stretched.start, covers_until=stretched.end)
    world.clock.advance(3 * 86400)  # the window must move: read again for the earlier claim
    moved = read_window(binding, world.clock.now(), POLICY, earlier)
    assert moved.start > stretched.start
    assert moved.end == at("2031-06-03T00:00:00+00:00")  # the later claim's reach kept
    assert read_window(binding, world.clock.now(), POLICY).end < earlier.start  # the sync's


def test_far_claims_on_one_day_read_one_window(world: World) -> None:
    world.bind()
    world.read()
    morning = Window(at("2031-06-01T08:00:00+00:00"), at("2031-06-01T08:15:00+00:00"))
    evening = Window(at("2031-06-01T21:00:00+00:00"), at("2031-06-01T21:15:00+00:00"))
    now = world.clock.now()
    assert read_window(world.binding(), now, POLICY, morning) == read_window(
        world.binding(), now, POLICY, evening
    )  # whichever of the two is stored covers the other
