"""Directory: emails to attendee ids per tenant; register keeps what exists, put moves aliases."""

from __future__ import annotations

from slotward.engine.approvals import DirectoryEntry
from slotward.engine.ports import UnitOfWork
from tests.contract.conftest import Db
from tests.contract.values import NOW


def _lookup(
    db: Db, emails: list[str], ids: list[str], tenant: str = "acme"
) -> tuple[dict[str, str], set[str]]:
    return db.look(lambda uow: uow.directory.lookup(tenant, emails, ids))


def test_an_empty_directory_knows_nobody(db: Db) -> None:
    assert _lookup(db, [], []) == ({}, set())
    assert _lookup(db, ["a@example.com"], ["att_a"]) == ({}, set())


def test_registered_attendees_are_found_by_email_and_id_in_their_tenant_only(db: Db) -> None:
    pairs = [("att_a", "a@example.com"), ("att_b", "b@example.com")]
    db.commit(lambda uow: uow.directory.register("acme", pairs, NOW))
    found = _lookup(db, ["a@example.com", "b@example.com", "c@example.com"], ["att_a", "att_c"])
    assert found == ({"a@example.com": "att_a", "b@example.com": "att_b"}, {"att_a"})
    assert _lookup(db, ["a@example.com"], ["att_a"], tenant="other") == ({}, set())


def test_register_keeps_an_email_and_an_attendee_that_exist(db: Db) -> None:
    db.commit(lambda uow: uow.directory.register("acme", [("att_a", "a@example.com")], NOW))
    again = [("att_x", "a@example.com"), ("att_a", "alias@example.com"), ("att_a", "a@example.com")]
    db.commit(lambda uow: uow.directory.register("acme", again, NOW))
    found = _lookup(db, ["a@example.com", "alias@example.com"], ["att_a", "att_x"])
    assert found == ({"a@example.com": "att_a", "alias@example.com": "att_a"}, {"att_a", "att_x"})


def test_put_creates_an_attendee_and_moves_its_aliases_to_it(db: Db) -> None:
    db.commit(lambda uow: uow.directory.register("acme", [("att_a", "a@example.com")], NOW))

    def put(uow: UnitOfWork) -> tuple[dict[str, str], set[str]]:
        uow.directory.put("acme", "att_b", "Bea", ["a@example.com", "b@example.com"], NOW)
        return uow.directory.lookup("acme", ["a@example.com", "b@example.com"], ["att_b"])

    moved = {"a@example.com": "att_b", "b@example.com": "att_b"}
    assert db.commit(put) == (moved, {"att_b"})
    assert _lookup(db, ["a@example.com", "b@example.com"], ["att_a", "att_b"]) == (
        moved,
        {"att_a", "att_b"},
    )
    # Put again (renamed, with no alias): the attendee and its aliases stay.
    db.commit(lambda uow: uow.directory.put("acme", "att_b", None, [], NOW))
    assert _lookup(db, ["b@example.com"], ["att_b"]) == ({"b@example.com": "att_b"}, {"att_b"})


def test_directory_changes_not_committed_are_gone(db: Db) -> None:
    def change(uow: UnitOfWork) -> None:
        uow.directory.register("acme", [("att_a", "a@example.com")], NOW)
        uow.directory.put("acme", "att_b", "Bea", ["b@example.com"], NOW)

    db.look(change)
    assert _lookup(db, ["a@example.com", "b@example.com"], ["att_a", "att_b"]) == ({}, set())


def _entries(db: Db, ids: list[str], tenant: str = "acme") -> list[DirectoryEntry]:
    return db.look(lambda uow: uow.directory.entries(tenant, ids))


def test_entries_are_the_known_attendees_by_id_with_their_emails_sorted(db: Db) -> None:
    def fill(uow: UnitOfWork) -> None:
        uow.directory.put("acme", "att_b", "Bea", ["bea@example.com", "b@example.com"], NOW)
        uow.directory.register("acme", [("att_a", "a@example.com")], NOW)
        uow.directory.put("acme", "att_c", None, [], NOW)
        uow.directory.put("other", "att_a", "Other A", ["a@other.example"], NOW)

    db.commit(fill)
    assert _entries(db, ["att_c", "att_z", "att_b", "att_a", "att_b"]) == [
        DirectoryEntry("att_a", None, ("a@example.com",)),
        DirectoryEntry("att_b", "Bea", ("b@example.com", "bea@example.com")),
        DirectoryEntry("att_c", None, ()),
    ]
    assert _entries(db, ["att_a"], tenant="other") == [
        DirectoryEntry("att_a", "Other A", ("a@other.example",))
    ]
    assert _entries(db, ["att_b"], tenant="other") == []
    assert _entries(db, []) == []


def test_an_alias_moved_to_another_attendee_is_an_entry_of_that_one(db: Db) -> None:
    db.commit(lambda uow: uow.directory.register("acme", [("att_a", "a@example.com")], NOW))
    db.commit(lambda uow: uow.directory.put("acme", "att_b", "Bea", ["a@example.com"], NOW))
    assert _entries(db, ["att_a", "att_b"]) == [
        DirectoryEntry("att_a", None, ()),
        DirectoryEntry("att_b", "Bea", ("a@example.com",)),
    ]
