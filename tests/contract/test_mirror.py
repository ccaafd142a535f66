"""The mirror: each attendee's busy blocks, replaced whole or per source, read by
overlap with a half-open window."""

from __future__ import annotations

from collections.abc import Collection

from slotward.engine.calendars import BusyBlock
from tests.contract.calendar_values import block
from tests.contract.conftest import Db
from tests.contract.values import at


def _replace(db: Db, *blocks: BusyBlock, attendee: str = "att_a", tenant: str = "acme") -> None:
    db.commit(lambda uow: uow.mirror.replace(tenant, attendee, list(blocks)))


def _over(
    db: Db,
    start: float = -600,
    end: float = 600,
    attendees: Collection[str] = ("att_a",),
    tenant: str = "acme",
) -> list[BusyBlock]:
    return db.look(lambda uow: uow.mirror.overlapping(tenant, attendees, at(start), at(end)))


def test_replace_makes_the_mirror_exactly_the_blocks(db: Db) -> None:
    _replace(db, block(0, 30), block(60, 90, source="b.ics"))
    assert _over(db) == [block(0, 30), block(60, 90, source="b.ics")]
    _replace(db, block(120, 150, source="c.ics"))
    assert _over(db) == [block(120, 150, source="c.ics")]
    _replace(db)
    assert _over(db) == []


def test_replace_leaves_other_attendees_and_tenants_alone(db: Db) -> None:
    _replace(db, block(0, 30, attendee="att_b"), attendee="att_b")
    _replace(db, block(0, 30, tenant="other"), tenant="other")
    _replace(db, block(0, 30))
    _replace(db)
    assert _over(db, attendees=["att_a", "att_b"]) == [block(0, 30, attendee="att_b")]
    assert _over(db, tenant="other") == [block(0, 30, tenant="other")]


def test_patch_replaces_the_changed_sources_and_removes_the_removed(db: Db) -> None:
    _replace(
        db,
        block(0, 30, source="a.ics"),
        block(40, 50, source="a.ics"),  # a recurring event: two blocks of one source
        block(60, 90, source="b.ics"),
        block(100, 110, source="c.ics"),
        block(120, 130, source="d.ics"),
    )
    changed = {
        "a.ics": [block(5, 35, source="a.ics")],
        "c.ics": [],  # changed to no longer busy (made transparent, say)
        "e.ics": [block(200, 210, source="e.ics"), block(220, 230, source="e.ics")],
    }
    db.commit(lambda uow: uow.mirror.patch("acme", "att_a", changed, ["d.ics", "gone.ics"]))
    assert _over(db) == [
        block(5, 35, source="a.ics"),
        block(60, 90, source="b.ics"),
        block(200, 210, source="e.ics"),
        block(220, 230, source="e.ics"),
    ]


def test_patch_leaves_other_attendees_sources_alone(db: Db) -> None:
    _replace(db, block(0, 30, attendee="att_b"), attendee="att_b")
    _replace(db, block(0, 30))
    db.commit(lambda uow: uow.mirror.patch("acme", "att_a", {}, ["a.ics"]))
    db.commit(lambda uow: uow.mirror.patch("acme", "att_a", {}, []))  # nothing: no error
    assert _over(db, attendees=["att_a", "att_b"]) == [block(0, 30, attendee="att_b")]


def test_overlap_is_half_open_at_both_ends(db: Db) -> None:
    _replace(
        db,
        block(0, 60, source="ends-at-start"),
        block(30, 61, source="ends-inside"),
        block(60, 90, source="inside"),
        block(89, 150, source="starts-inside"),
        block(120, 180, source="starts-at-end"),
        block(-600, 600, source="around"),
    )
    found = [b.source for b in _over(db, 60, 120)]
    assert found == ["around", "ends-inside", "inside", "starts-inside"]


def test_a_block_long_before_the_window_that_reaches_into_it_is_found(db: Db) -> None:
    # A week-long all-day block begun days ago.
    _replace(db, block(-60 * 24 * 7, 1, source="vacation"), block(-60 * 24 * 8, -1, source="past"))
    assert [b.source for b in _over(db, 0, 30)] == ["vacation"]


def test_overlapping_blocks_come_by_start_then_attendee_then_source(db: Db) -> None:
    _replace(db, block(10, 20, source="z", attendee="att_b"), block(0, 20, attendee="att_b"),
             attendee="att_b")  # fmt: skip
    _replace(db, block(10, 20, source="b"), block(10, 20, source="a"), block(5, 20))
    found = _over(db, 0, 30, attendees=["att_b", "att_a", "att_c"])
    assert [(b.start, b.attendee, b.source) for b in found] == [
        (at(0), "att_b", "a.ics"),
        (at(5), "att_a", "a.ics"),
        (at(10), "att_a", "a"),
        (at(10), "att_a", "b"),
        (at(10), "att_b", "z"),
    ]


def test_only_the_attendees_asked_for_of_the_tenant_are_read(db: Db) -> None:
    _replace(db, block(0, 30))
    _replace(db, block(0, 30, attendee="att_b"), attendee="att_b")
    _replace(db, block(0, 30, attendee="att_c", tenant="other"), attendee="att_c", tenant="other")
    assert _over(db, attendees=["att_b", "att_c"]) == [block(0, 30, attendee="att_b")]
    assert _over(db, attendees=[]) == []


def test_instants_keep_their_microseconds(db: Db) -> None:
    exact = BusyBlock("acme", "att_a", "a.ics", at(0, us=1), at(30, us=999_999))
    _replace(db, exact)
    assert _over(db) == [exact]
    after = db.look(lambda uow: uow.mirror.overlapping("acme", ["att_a"], exact.end, at(40)))
    assert after == []  # it ends exactly where the window starts


def test_a_change_not_committed_was_never_made(db: Db) -> None:
    _replace(db, block(0, 30))
    db.look(lambda uow: uow.mirror.replace("acme", "att_a", [block(60, 90)]))
    db.look(lambda uow: uow.mirror.patch("acme", "att_a", {}, ["a.ics"]))
    assert _over(db) == [block(0, 30)]
