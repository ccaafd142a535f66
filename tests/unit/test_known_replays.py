"""A create replayed from what this process knows of it answers as the whole path would.

The oracle is placing.lookup_replay, the read the whole path makes: whatever
``replay_known`` answers must be its answer, byte for byte and header for
header; where they would differ (an email moved, a record gone), it must
answer None so the whole path decides.
"""

from __future__ import annotations

import orjson
import pytest

from slotward.api.replays import KnownCreates, known_create, sent_as, tool_call_sent_as
from slotward.engine.model import Principal, Reply
from slotward.engine.usecases.known_replays import KnownCreate, replay_known
from slotward.engine.usecases.placing import HoldRequest, lookup_replay
from tests.unit.test_usecases import ALICE, BOB, T0, TENANT, TTL, World, request


@pytest.fixture
def world() -> World:
    return World()


def known_of(world: World, req: HoldRequest) -> tuple[Reply, KnownCreate]:
    first = world.place(req)
    known = known_create(TENANT, req.workflow_id, req.attendees, first)
    assert known is not None
    return first, known


def whole_path(world: World, req: HoldRequest) -> Reply | None:
    return lookup_replay(world.uow(), req, world.policy, world.clock).reply


def known_path(world: World, known: KnownCreate) -> Reply | None:
    return replay_known(world.uow(), known, world.clock.now())


def test_an_untouched_create_replays_as_the_whole_path_does(world: World) -> None:
    req = request(attendees=("Bob@Example.com", "carol@example.com"))
    first, known = known_of(world, req)
    answer = known_path(world, known)
    assert answer is not None
    assert answer == whole_path(world, req)
    assert (answer.body, answer.key, answer.replayed) == (first.body, first.key, True)
    assert answer.hold_status == "held"


@pytest.mark.parametrize("change", ["commit", "release", "expire"])
def test_the_hold_status_is_read_now(world: World, change: str) -> None:
    req = request()
    first, known = known_of(world, req)
    assert first.hold_id is not None
    token = world.hold(first.hold_id).token
    if change == "commit":
        world.commit(ALICE, first.hold_id, token)
    elif change == "release":
        world.release(ALICE, first.hold_id)
    else:
        world.clock.advance(TTL + 1)
    answer = known_path(world, known)
    assert answer is not None
    assert answer == whole_path(world, req)
    assert answer.hold_status == {"commit": "committed", "release": "released",
                                  "expire": "expired"}[change]  # fmt: skip


def test_an_email_moved_to_another_attendee_sends_the_call_down_the_whole_path(
    world: World,
) -> None:
    req = request()
    first, known = known_of(world, req)
    with world.uow() as uow:
        uow.directory.put(TENANT, "att_someone_else", "Bob, now", ["bob@example.com"], T0)
        uow.commit()
    assert known_path(world, known) is None
    # The whole path: another attendee, so another intent and another key.
    assert lookup_replay(world.uow(), req, world.policy, world.clock).key != first.key


def test_a_record_gone_sends_the_call_down_the_whole_path(world: World) -> None:
    req = request()
    first, known = known_of(world, req)
    with world.uow() as uow:
        uow.ledger.remove(TENANT, first.key)
        uow.commit()
    assert known_path(world, known) is None


def test_attendees_named_by_id_and_by_email_both_count(world: World) -> None:
    world.place(request(attendees=("dave@example.com",)))  # dave is in the directory now
    dave = world.state.emails[(TENANT, "dave@example.com")]
    req = request(attendees=(dave, "erin@example.com"), start="2030-10-01T12:00:00Z")
    _, known = known_of(world, req)
    assert (known.emails, known.ids) == (("erin@example.com",), (dave,))
    assert known_path(world, known) == whole_path(world, req)


def test_a_fresh_create_says_its_attendees_as_its_answer_holds_them(world: World) -> None:
    # known_create takes them from the answer's side, not by decoding its body.
    first, known = known_of(world, request(attendees=("frank@example.com", "erin@example.com")))
    assert first.attendees
    assert set(first.attendees) == set(orjson.loads(first.body)["attendees"])
    assert known.attendees == frozenset(first.attendees)


def test_only_a_new_hold_is_known() -> None:
    fresh = Reply(created=True, body=b'{"attendees":["a"]}', key="idem_x", replayed=False,
                  hold_id="hold_1")  # fmt: skip
    assert known_create(TENANT, "wf", (), fresh) is not None
    for other in (
        Reply(created=True, body=fresh.body, key="idem_x", replayed=True, hold_id="hold_1"),
        Reply(created=False, body=b"{}", key="idem_x", replayed=False, hold_id="hold_1"),
        Reply(created=True, body=b"{}", key="idem_x", replayed=False),
    ):
        assert known_create(TENANT, "wf", (), other) is None


def test_the_latest_creates_are_kept_and_the_oldest_forgotten() -> None:
    known = KnownCreates(capacity=2)
    entries = [KnownCreate(TENANT, "wf", f"idem_{i}", f"hold_{i}", (), (), frozenset())
               for i in range(3)]  # fmt: skip
    sent = [(BOB, f"body {i}".encode()) for i in range(3)]
    known.add(sent[0], entries[0])
    known.add(sent[1], entries[1])
    assert known.get(sent[0]) is entries[0]
    known.add(sent[0], entries[0])  # added again: the newest now
    known.add(sent[2], entries[2])
    assert (known.get(sent[0]), known.get(sent[1]), known.get(sent[2])) == (
        entries[0], None, entries[2])  # fmt: skip
    known.forget(sent[0])
    assert known.get(sent[0]) is None
    assert len(known) == 1
    with pytest.raises(ValueError, match="capacity"):
        KnownCreates(capacity=0)
    other: tuple[Principal, bytes] = (ALICE, b"body 2")
    assert known.get(other) is None  # another caller's same bytes are another request


def test_a_tool_call_is_known_by_its_caller_envelope_and_arguments() -> None:
    alice = Principal(TENANT, "agent-a", "agent", 50)
    args = {"attendees": ["alex@example.com"], "start": "2030-10-14T14:00:00Z"}
    sent = tool_call_sent_as(alice, "wf-1", 3, args)
    assert sent is not None
    # The same call, its arguments in another order: the same request.
    assert tool_call_sent_as(alice, "wf-1", 3, dict(reversed(args.items()))) == sent
    others = [
        tool_call_sent_as(Principal(TENANT, "agent-b", "agent", 50), "wf-1", 3, args),
        tool_call_sent_as(alice, "wf-2", 3, args),
        tool_call_sent_as(alice, "wf-1", 4, args),
        tool_call_sent_as(alice, "wf-1", 3, {**args, "duration_minutes": 30}),
    ]
    assert sent not in others
    assert len(set(others)) == len(others)
    # Never a hold body's key, whatever its bytes.
    doc = b'["wf-1",3,{"attendees":["alex@example.com"],"start":"2030-10-14T14:00:00Z"}]'
    assert sent != sent_as(alice, doc)
