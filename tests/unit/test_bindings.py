"""The calendar binding use cases on the in-memory fakes: bind, read, rebind, unbind.

Each call runs in its own unit of work over one shared ``State``, as the store
would run it. Holds are placed, committed and released through their own use
cases, so the backfill is checked against holds as the engine makes them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import pytest

from slotward.engine.clock import FixedClock
from slotward.engine.errors import NotFound, ValidationFailed
from slotward.engine.fakes import InMemoryUnitOfWork, SequentialIds, State
from slotward.engine.model import Principal
from slotward.engine.rules.attendees import attendee_id_for_email, parse_attendees
from slotward.engine.rules.calendar_events import event_uid
from slotward.engine.rules.policy import Policy
from slotward.engine.rules.timenorm import normalize_interval
from slotward.engine.usecases import bindings as uc
from slotward.engine.usecases.lifecycle import HoldAction, commit_hold, release_hold
from slotward.engine.usecases.placing import HoldRequest, place_hold

T0 = datetime(2030, 10, 1, 9, 0, tzinfo=UTC)
ADMIN = Principal("acme", "ops", "admin", 0)
AGENT = Principal("acme", "agent-a", "agent", 50)
OUTSIDER = Principal("globex", "ops", "admin", 0)
ALEX = "alex@example.com"
ALEX_ID = attendee_id_for_email("acme", ALEX)


@dataclass
class World:
    state: State = field(default_factory=State)
    clock: FixedClock = field(default_factory=lambda: FixedClock(T0))
    ids: SequentialIds = field(default_factory=SequentialIds)
    policy: Policy = field(default_factory=Policy)
    sealed_for: list[str] = field(default_factory=list)

    def uow(self) -> InMemoryUnitOfWork:
        return InMemoryUnitOfWork(self.state)

    def seal(self, attendee: str) -> str:
        self.sealed_for.append(attendee)
        return f"sealed-for-{attendee}"

    def bind(
        self,
        attendee: str = ALEX,
        *,
        url: str = "https://dav.example.com/alex/",
        who: Principal = ADMIN,
        password: bool = True,
        writes: bool = True,
    ) -> Any:
        new = uc.NewBinding(
            attendee=uc.parse_attendee(attendee), provider="caldav", url=url,
            username="alex" if password else None, timezone="Europe/Berlin",
            on_unavailable="last_known",
        )  # fmt: skip
        return uc.put_binding(
            self.uow(), who, new, self.seal if password else (lambda _: None), writes=writes,
            policy=self.policy, clock=self.clock,
        )  # fmt: skip

    def get(self, attendee: str = ALEX, who: Principal = ADMIN) -> dict[str, Any]:
        return uc.get_binding(self.uow(), who, uc.parse_attendee(attendee))

    def delete(self, attendee: str = ALEX, who: Principal = ADMIN) -> None:
        uc.delete_binding(self.uow(), who, uc.parse_attendee(attendee), self.policy, self.clock)

    def place(self, start: str, attendees: tuple[str, ...] = (ALEX,)) -> dict[str, Any]:
        req = HoldRequest(
            principal=AGENT, workflow_id=f"wf-{start}", step=None,
            attendees=parse_attendees(list(attendees)),
            interval=normalize_interval(start=start, duration_minutes=30), title="Sync",
            description=None, priority=50, ttl_seconds=300, client_key=None,
        )  # fmt: skip
        doc: dict[str, Any] = json.loads(place_hold(self.uow(), req, self.policy, self.clock,
                                                    self.ids).body)  # fmt: skip
        return doc

    def commit(self, hold: dict[str, Any]) -> None:
        action = HoldAction(AGENT, hold["id"], token=hold["token"])
        commit_hold(self.uow(), action, self.policy, self.clock, self.ids)

    def release(self, hold: dict[str, Any]) -> None:
        release_hold(self.uow(), HoldAction(AGENT, hold["id"]), self.policy, self.clock, self.ids)

    def actions(self) -> list[tuple[str, str]]:
        entries = self.state.audit.get("acme", [])
        return [(e.action, e.outcome) for e in entries if e.action.startswith("calendar.")]


@pytest.fixture
def world() -> World:
    return World()


def test_a_binding_is_stored_and_read_back_without_its_password(world: World) -> None:
    stored = world.bind()
    assert (stored.attendee, stored.password) == (ALEX_ID, f"sealed-for-{ALEX_ID}")
    assert world.sealed_for == [ALEX_ID]  # sealed for the attendee the directory names
    doc = world.get()
    assert doc == {
        "attendee": ALEX_ID, "provider": "caldav", "url": "https://dav.example.com/alex/",
        "username": "alex", "has_password": True, "timezone": "Europe/Berlin",
        "on_unavailable": "last_known", "created_at": "2030-10-01T09:00:00Z",
        "updated_at": "2030-10-01T09:00:00Z",
        "sync": {
            "status": "pending", "external_as_of": None, "error": None, "error_at": None,
            "failures": 0, "covers": None,
            "writes": {"pending": 0, "delivered": 0, "dead": 0},
        },
    }  # fmt: skip
    assert "sealed" not in json.dumps(doc)
    assert world.get(ALEX_ID) == doc  # by id as by email
    assert world.get("  Alex@Example.COM ") == doc
    assert world.actions() == [("calendar.bind", "bound")]


def test_an_unknown_email_is_registered_as_the_attendee_it_would_be(world: World) -> None:
    world.bind()
    uow = world.uow()
    with uow:
        directory, known = uow.directory.lookup("acme", [ALEX], [ALEX_ID])
    assert (directory, known) == ({ALEX: ALEX_ID}, {ALEX_ID})


def test_a_closed_directory_refuses_an_unknown_attendee_and_stores_nothing(world: World) -> None:
    world.policy = Policy(allow_unknown_attendees=False)
    before = json.dumps(repr(world.state))
    with pytest.raises(ValidationFailed) as caught:
        world.bind()
    assert (caught.value.code, caught.value.extra["field"]) == ("unknown_attendee", "attendee")
    assert json.dumps(repr(world.state)) == before
    with pytest.raises(ValidationFailed) as by_id:
        world.bind("room-12")
    assert by_id.value.code == "unknown_attendee"


def test_a_path_that_is_no_attendee_is_refused_with_its_field() -> None:
    with pytest.raises(ValidationFailed) as caught:
        uc.parse_attendee("not an attendee!")
    assert caught.value.code == "invalid_attendee"
    assert caught.value.extra == {"field": "attendee"}


def test_the_live_holds_of_the_attendee_are_queued_for_a_calendar_that_writes(
    world: World,
) -> None:
    held = world.place("2030-10-02T10:00:00Z")
    committed = world.place("2030-10-03T10:00:00Z")
    world.commit(committed)
    released = world.place("2030-10-04T10:00:00Z")
    world.release(released)
    world.place("2030-10-05T10:00:00Z", attendees=("someone-else@example.com",))
    world.bind()
    writes = sorted(world.state.calendar_writes.values(), key=lambda w: w.start)
    assert [(w.hold_id, w.attendee, w.action, w.status, w.state) for w in writes] == [
        (held["id"], ALEX_ID, "put", "TENTATIVE", "pending"),
        (committed["id"], ALEX_ID, "put", "CONFIRMED", "pending"),
    ]
    assert writes[0].uid == event_uid(held["id"])
    assert world.get()["sync"]["writes"] == {"pending": 2, "delivered": 0, "dead": 0}


def test_a_calendar_that_does_not_write_gets_no_writes(world: World) -> None:
    world.place("2030-10-02T10:00:00Z")
    world.bind(writes=False, password=False)
    assert world.state.calendar_writes == {}
    assert world.get()["has_password"] is False


def test_an_expired_hold_is_not_queued(world: World) -> None:
    world.place("2030-10-02T10:00:00Z")
    world.clock.advance(301)
    world.bind()
    assert world.state.calendar_writes == {}


def test_binding_again_replaces_the_binding_and_queues_the_holds_for_the_new_calendar(
    world: World,
) -> None:
    hold = world.place("2030-10-02T10:00:00Z")
    world.bind()
    key = ("acme", hold["id"], ALEX_ID)
    # Written to the old calendar, and its sync state moved on.
    world.state.calendar_writes[key] = replace(world.state.calendar_writes[key], state="delivered")
    binding = world.state.bindings[("acme", ALEX_ID)]
    world.state.bindings[("acme", ALEX_ID)] = replace(
        binding, status="ok", synced_at=T0, failures=0, cursor="etag-1", version=3
    )
    world.clock.advance(120)
    world.bind(url="https://dav.example.com/alex/other/")
    doc = world.get()
    assert doc["url"] == "https://dav.example.com/alex/other/"
    assert (doc["created_at"], doc["updated_at"]) == ("2030-10-01T09:00:00Z",
                                                      "2030-10-01T09:02:00Z")  # fmt: skip
    assert (doc["sync"]["status"], doc["sync"]["external_as_of"]) == ("pending", None)
    assert world.state.bindings[("acme", ALEX_ID)].cursor is None
    assert world.state.calendar_writes[key].state == "pending"  # the new calendar gets it
    assert world.actions() == [("calendar.bind", "bound"), ("calendar.bind", "bound")]


def test_binding_the_same_calendar_again_keeps_the_writes_still_to_make(world: World) -> None:
    """A new password, a key rotation, another policy: a delete still waiting to
    be written (the calendar was down when the hold was released) is not lost."""
    hold = world.place("2030-10-02T10:00:00Z")
    world.bind()
    key = ("acme", hold["id"], ALEX_ID)
    waiting = replace(world.state.calendar_writes[key], action="delete", status=None, version=2)
    world.state.calendar_writes[key] = waiting
    world.clock.advance(60)
    world.bind()  # the same calendar
    assert world.state.calendar_writes[key] == waiting


def test_binding_the_same_calendar_again_tries_its_dead_writes_again(world: World) -> None:
    hold = world.place("2030-10-02T10:00:00Z")
    world.bind()
    key = ("acme", hold["id"], ALEX_ID)
    dead = replace(world.state.calendar_writes[key], state="dead", attempts=10, last_error="503")
    world.state.calendar_writes[key] = dead
    world.clock.advance(60)
    world.bind()
    again = world.state.calendar_writes[key]
    assert (again.state, again.attempts) == ("pending", 0)
    assert again.next_attempt_at == world.clock.now()


def test_unbinding_drops_the_binding_and_its_writes(world: World) -> None:
    world.place("2030-10-02T10:00:00Z")
    world.bind()
    world.delete()
    assert world.state.bindings == {}
    assert world.state.calendar_writes == {}
    with pytest.raises(NotFound) as read:
        world.get()
    assert read.value.code == "calendar_not_found"
    with pytest.raises(NotFound) as again:
        world.delete()
    assert again.value.code == "calendar_not_found"
    assert world.actions() == [("calendar.bind", "bound"), ("calendar.unbind", "unbound")]


def test_another_tenant_sees_no_binding_and_cannot_remove_it(world: World) -> None:
    world.bind()
    for call in (world.get, world.delete):
        with pytest.raises(NotFound):
            call(ALEX_ID, OUTSIDER)
    assert ("acme", ALEX_ID) in world.state.bindings


def test_an_unknown_attendee_has_no_binding_to_read(world: World) -> None:
    with pytest.raises(NotFound) as caught:
        world.get("nobody@example.com")
    assert caught.value.code == "calendar_not_found"
