"""Calendar bindings: one per attendee, replaced whole, their sync state stored by
compare-and-set, claimed for a read when due."""

from __future__ import annotations

from dataclasses import replace

from slotward.engine.calendars import CalendarBinding
from slotward.engine.ports import UnitOfWork
from tests.contract.calendar_values import binding, block
from tests.contract.conftest import Db
from tests.contract.values import NOW, at


def _put(db: Db, *bindings: CalendarBinding) -> None:
    def put(uow: UnitOfWork) -> None:
        for b in bindings:
            uow.calendars.put(b)

    db.commit(put)


def _get(db: Db, attendee: str = "att_a", tenant: str = "acme") -> CalendarBinding | None:
    return db.look(lambda uow: uow.calendars.get(tenant, attendee))


def _mirror(db: Db, attendee: str = "att_a") -> list[str]:
    found = db.look(lambda uow: uow.mirror.overlapping("acme", [attendee], at(-600), at(600)))
    return [b.source for b in found]


def _claim(db: Db, owner: str = "sync-a", now: float = 0, limit: int = 10) -> list[str]:
    claimed = db.commit(lambda uow: uow.calendars.claim_due(owner, at(now), at(now + 5), limit))
    return [b.attendee for b in claimed]


def _synced(b: CalendarBinding, version: int) -> CalendarBinding:
    """The sync state a read stores: every field of it changed."""
    return replace(
        b,
        status="ok",
        synced_at=at(1),
        covers_from=at(-60),
        covers_until=at(60 * 24 * 30),
        cursor="token-2",
        version=version,
        error="was unreachable",
        error_at=at(-1),
        failures=2,
        next_sync_at=at(6),
        sync_owner=None,
        sync_until=None,
    )


def test_a_binding_reads_back_as_written(db: Db) -> None:
    written = _synced(binding(), 3)
    _put(db, written)
    assert _get(db) == written
    assert _get(db, "att_b") is None
    assert _get(db, tenant="other") is None


def test_a_binding_never_read_reads_back_as_written(db: Db) -> None:
    written = binding(username=None, password=None)
    _put(db, written)
    assert _get(db) == written


def test_put_replaces_the_whole_binding_and_drops_its_mirror_alone(db: Db) -> None:
    _put(db, _synced(binding(), 3), binding("att_b"))
    db.commit(lambda uow: uow.mirror.replace("acme", "att_a", [block(0, 30)]))
    db.commit(lambda uow: uow.mirror.replace("acme", "att_b", [block(0, 30, attendee="att_b")]))

    fresh = binding(
        provider="ics", url="https://example.com/a.ics", username=None, updated_at=at(9)
    )
    _put(db, fresh)
    assert _get(db) == fresh  # its sync state afresh too
    assert _mirror(db) == []
    assert _mirror(db, "att_b") == ["a.ics"]


def test_bindings_of_attendees_are_those_that_exist_in_attendee_order(db: Db) -> None:
    _put(db, binding("att_c"), binding("att_a"), binding("att_b", tenant="other"))
    found = db.look(lambda uow: uow.calendars.for_attendees("acme", ["att_c", "att_b", "att_a"]))
    assert [b.attendee for b in found] == ["att_a", "att_c"]
    assert found[0] == binding("att_a")
    assert db.look(lambda uow: uow.calendars.for_attendees("acme", [])) == []


def test_remove_deletes_the_binding_and_its_mirror(db: Db) -> None:
    _put(db, binding(), binding("att_b"))
    db.commit(lambda uow: uow.mirror.replace("acme", "att_a", [block(0, 30)]))
    db.commit(lambda uow: uow.mirror.replace("acme", "att_b", [block(0, 30, attendee="att_b")]))

    assert db.commit(lambda uow: uow.calendars.remove("acme", "att_a"))
    assert _get(db) is None
    assert _mirror(db) == []
    assert _mirror(db, "att_b") == ["a.ics"]
    assert not db.commit(lambda uow: uow.calendars.remove("acme", "att_a"))
    assert not db.commit(lambda uow: uow.calendars.remove("other", "att_b"))
    assert _get(db, "att_b") == binding("att_b")


def test_store_sync_writes_the_sync_state_when_the_version_is_still_expected(db: Db) -> None:
    _put(db, binding())
    read = _synced(binding(url="https://elsewhere.example.com/", timezone="UTC"), 1)
    assert db.commit(lambda uow: uow.calendars.store_sync(read, 0))
    # The sync state, and nothing of what the binding is.
    assert _get(db) == _synced(binding(), 1)


def test_store_sync_writes_nothing_when_another_read_stored_first(db: Db) -> None:
    _put(db, binding())
    first = _synced(binding(), 1)
    assert db.commit(lambda uow: uow.calendars.store_sync(first, 0))
    late = replace(_synced(binding(), 1), cursor="token-late", status="error")
    assert not db.commit(lambda uow: uow.calendars.store_sync(late, 0))
    assert _get(db) == first


def test_store_sync_of_a_binding_replaced_meanwhile_stores_nothing(db: Db) -> None:
    """A read of the old calendar still in flight when the admin binds another one
    (whose version starts again at 0) must not land in the new binding."""
    _put(db, binding())
    _put(db, binding(url="https://elsewhere.example.com/", updated_at=at(1)))
    assert not db.commit(lambda uow: uow.calendars.store_sync(_synced(binding(), 1), 0))
    assert _get(db) == binding(url="https://elsewhere.example.com/", updated_at=at(1))


def test_store_sync_of_a_binding_gone_is_false_and_stores_nothing(db: Db) -> None:
    assert not db.commit(lambda uow: uow.calendars.store_sync(_synced(binding(), 1), 0))
    assert _get(db) is None


def test_bindings_due_are_claimed_soonest_first_never_read_before_all(db: Db) -> None:
    _put(
        db,
        binding("att_late", next_sync_at=at(-1)),
        binding("att_soon", next_sync_at=at(-5)),
        binding("att_new"),  # never read
        binding("att_now", next_sync_at=NOW),  # due at its instant
        binding("att_later", next_sync_at=at(1)),  # not yet
    )
    assert _claim(db) == ["att_new", "att_soon", "att_late", "att_now"]


def test_a_claim_is_saved_and_holds_until_it_is_over(db: Db) -> None:
    _put(db, binding())
    [claimed] = db.commit(lambda uow: uow.calendars.claim_due("sync-a", NOW, at(5), 10))
    assert (claimed.sync_owner, claimed.sync_until) == ("sync-a", at(5))
    assert claimed == replace(binding(), sync_owner="sync-a", sync_until=at(5))
    assert _get(db) == claimed
    assert _claim(db, "sync-b", now=4) == []  # claimed
    assert _claim(db, "sync-b", now=5) == ["att_a"]  # the claim is over at its until
    assert _get(db) == replace(binding(), sync_owner="sync-b", sync_until=at(10))


def test_claims_take_at_most_the_limit_and_then_the_rest(db: Db) -> None:
    _put(db, *(binding(f"att_{i}", next_sync_at=at(-10 + i)) for i in range(5)))
    assert _claim(db, limit=2) == ["att_0", "att_1"]
    assert _claim(db, "sync-b", limit=10) == ["att_2", "att_3", "att_4"]


def test_bindings_of_every_tenant_are_claimed(db: Db) -> None:
    _put(db, binding(tenant="other", next_sync_at=at(-2)), binding(next_sync_at=at(-1)))
    claimed = db.commit(lambda uow: uow.calendars.claim_due("sync-a", NOW, at(5), 10))
    assert [(b.tenant, b.attendee) for b in claimed] == [("other", "att_a"), ("acme", "att_a")]


def test_a_put_or_claim_not_committed_was_never_made(db: Db) -> None:
    db.look(lambda uow: uow.calendars.put(binding()))
    assert _get(db) is None
    _put(db, binding())
    db.look(lambda uow: uow.calendars.claim_due("sync-a", NOW, at(5), 10))
    db.look(lambda uow: uow.calendars.remove("acme", "att_a"))
    assert _get(db) == binding()
    assert _claim(db, "sync-b") == ["att_a"]
