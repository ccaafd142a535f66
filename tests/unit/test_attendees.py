"""Attendee parsing, email normalization and resolution to ids."""

from __future__ import annotations

import hashlib
import json
import re

import pytest

from slotward.api.http.statuses import status_of
from slotward.engine.errors import ValidationFailed
from slotward.engine.rules.attendees import (
    MAX_ATTENDEES,
    AttendeeRef,
    ResolvedAttendees,
    attendee_id_for_email,
    normalize_email,
    parse_attendees,
    resolve_attendees,
)


def _parse_error(entries: object) -> ValidationFailed:
    with pytest.raises(ValidationFailed) as info:
        parse_attendees(entries)
    return info.value


# parse_attendees


def test_parse_ids_and_emails_in_order() -> None:
    refs = parse_attendees(["usr_42", "  Ada@Example.COM ", "Grace Hopper <GRACE@navy.mil>"])
    assert refs == (
        AttendeeRef("id", "usr_42", None),
        AttendeeRef("email", "ada@example.com", None),
        AttendeeRef("email", "grace@navy.mil", "Grace Hopper"),
    )


def test_parse_keeps_duplicates_for_resolution() -> None:
    refs = parse_attendees(["a@x.io", "A@X.IO"])
    assert [r.value for r in refs] == ["a@x.io", "a@x.io"]


@pytest.mark.parametrize(
    ("entry", "name"),
    [
        ("<ada@x.io>", None),
        ("  Ada   <ada@x.io>  ", "Ada"),
        ('"Lovelace, Ada" <ada@x.io>', "Lovelace, Ada"),
        ("Ada<ada@x.io>", "Ada"),
        ("Ada < ada@x.io >", "Ada"),
        ('"" <ada@x.io>', None),
    ],
)
def test_parse_named_form(entry: str, name: str | None) -> None:
    assert parse_attendees([entry]) == (AttendeeRef("email", "ada@x.io", name),)


def test_email_case_folding_goes_beyond_lower() -> None:
    (ref,) = parse_attendees(["STRAẞE@Example.de"])
    assert ref.value == "strasse@example.de"


@pytest.mark.parametrize(
    "entry",
    ["a", "A1", "usr_42", "usr.42:x-y_z", "9", "x" * 128, " padded "],
)
def test_parse_valid_ids(entry: str) -> None:
    assert parse_attendees([entry]) == (AttendeeRef("id", entry.strip()),)


def test_ids_are_case_sensitive() -> None:
    assert parse_attendees(["Usr_1"])[0].value == "Usr_1"


@pytest.mark.parametrize(
    "entry",
    [
        "",
        "   ",
        "_leading",
        "-leading",
        ".leading",
        "x" * 129,
        "has space",
        "slash/id",
        "ünïcode",
        "tab\tid",
        "a,b",
        "@",
        "a@",
        "@x.io",
        "a@b",
        "a@.io",
        "a@io.",
        "a@b@x.io",
        "a b@x.io",
        "a@x .io",
        "a@x\u200b.io",
        "a\x00@x.io",
        "a<b@x.io",
        '"a"@x.io',
        "Ada <ada@x.io> extra",
        "Ada <not-an-email>",
        "Ada <usr_42>",
        "Ada <>",
        "Ada <a@x.io",
        "a@x.io, b@x.io",
        "a@x.io,b@x.io",
        "x" * 250 + "@x.io",
        3,
        None,
        1.5,
        True,
        ["a@x.io"],
        {"email": "a@x.io"},
    ],
)
def test_parse_invalid_attendee(entry: object) -> None:
    err = _parse_error(["usr_ok", entry])
    assert err.code == "invalid_attendee"
    assert err.extra == {"field": "attendees", "index": 1}
    assert status_of(err) == 422


def test_email_length_limit_is_254() -> None:
    longest = "x" * 249 + "@x.io"
    assert len(longest) == 254
    assert parse_attendees([longest])[0].value == longest
    assert _parse_error([longest + "o"]).code == "invalid_attendee"


def test_invalid_attendee_detail_is_bounded() -> None:
    assert len(_parse_error(["x y" * 10_000]).detail) < 200


@pytest.mark.parametrize(
    "entries",
    [
        [],
        None,
        "a@x.io",
        ("a@x.io",),
        {"a@x.io": 1},
        ["usr_1"] * (MAX_ATTENDEES + 1),
        ["a@x.io"] * (MAX_ATTENDEES + 1),  # counted before deduplication
    ],
)
def test_parse_invalid_attendee_list(entries: object) -> None:
    err = _parse_error(entries)
    assert err.code == "invalid_attendees"
    assert err.extra == {"field": "attendees"}


def test_parse_hundred_entries_is_fine() -> None:
    assert len(parse_attendees([f"usr_{i}" for i in range(MAX_ATTENDEES)])) == MAX_ATTENDEES


def test_normalize_email() -> None:
    assert normalize_email("  Ada@X.IO\n") == "ada@x.io"
    with pytest.raises(ValidationFailed) as info:
        normalize_email("nope")
    assert info.value.code == "invalid_attendee"


def test_an_email_with_a_domain_idna_refuses_names_its_entry() -> None:
    err = _parse_error(["usr_ok", "ana@ab--c.example"])
    assert err.code == "invalid_email_domain"
    assert err.extra == {"field": "attendees", "index": 1}
    assert status_of(err) == 422


def test_spellings_of_one_mailbox_parse_to_one_value() -> None:
    refs = parse_attendees(
        ["josé@bücher.example", "JOSE\u0301@XN--BCHER-KVA.EXAMPLE.", "José <josé@Bücher.example>"]
    )
    assert {r.value for r in refs} == {"josé@xn--bcher-kva.example"}


# attendee_id_for_email


def test_attendee_id_shape_and_determinism() -> None:
    first = attendee_id_for_email("t1", "ada@x.io")
    assert re.fullmatch(r"att_[0-9a-f]{32}", first)
    assert attendee_id_for_email("t1", "ada@x.io") == first


def test_attendee_id_is_sha256_of_canonical_json() -> None:
    # RFC 8785 sorts keys and drops whitespace; for plain ASCII that is this.
    doc = json.dumps({"email": "ada@x.io", "tenant": "t1"}, separators=(",", ":"))
    digest = hashlib.sha256(doc.encode()).hexdigest()
    assert attendee_id_for_email("t1", "ada@x.io") == "att_" + digest[:32]


def test_attendee_id_depends_on_tenant_and_email() -> None:
    ids = {
        attendee_id_for_email("t1", "ada@x.io"),
        attendee_id_for_email("t2", "ada@x.io"),
        attendee_id_for_email("t1", "bob@x.io"),
    }
    assert len(ids) == 3


def test_attendee_id_does_not_concatenate() -> None:
    assert attendee_id_for_email("ab", "c@x.io") != attendee_id_for_email("a", "bc@x.io")


def test_attendee_id_normalizes_the_email() -> None:
    assert attendee_id_for_email("t1", " Ada@X.IO ") == attendee_id_for_email("t1", "ada@x.io")
    nfd = "jose\u0301@example.com"
    assert attendee_id_for_email("t1", nfd) == attendee_id_for_email("t1", "josé@example.com")


@pytest.mark.parametrize(
    ("email", "pinned"),
    [
        # What the code before the normalization of migration 0005 derived: an
        # email whose normal form did not change keeps its id, byte for byte.
        ("ada@x.io", "att_2662558ed0e52f7c942926f483b59a65"),
        ("josé@example.com", "att_b61ce25e7bf1d2832719cf0a534418e9"),
        ("ana@xn--bcher-kva.example", "att_45eae0c84d27d149332c5cbd5c261dbf"),
        # Changed on purpose: the U-label spelling now is the A-label mailbox
        # (before: att_3b439503ae5c9dc21d90656bda7d3891). A stored alias keeps
        # its attendee through migration 0005; only unseen emails derive anew.
        ("ana@bücher.example", "att_45eae0c84d27d149332c5cbd5c261dbf"),
    ],
)
def test_derived_ids_are_pinned(email: str, pinned: str) -> None:
    assert attendee_id_for_email("t1", email) == pinned


# resolve_attendees


ADA_ID = "usr_ada"
DIRECTORY = {"ada@x.io": ADA_ID, "ada.lovelace@x.io": ADA_ID, "bob@x.io": "usr_bob"}
KNOWN = {ADA_ID, "usr_bob", "usr_carol"}


def _resolve(entries: list[object], *, allow_unknown: bool = True) -> ResolvedAttendees:
    return resolve_attendees(
        "t1",
        parse_attendees(entries),
        directory=DIRECTORY,
        known_ids=KNOWN,
        allow_unknown=allow_unknown,
    )


def test_resolve_maps_aliases_sorts_and_dedups() -> None:
    resolved = _resolve(["usr_carol", "Ada Lovelace <ADA.LOVELACE@x.io>", "ada@x.io", "usr_ada"])
    assert resolved == ResolvedAttendees(ids=("usr_ada", "usr_carol"), new=())


def test_resolve_unknown_email_gets_derived_id() -> None:
    resolved = _resolve(["Zed <ZED@y.io>", "zed@y.io", "bob@x.io"])
    zed = attendee_id_for_email("t1", "zed@y.io")
    assert resolved.ids == tuple(sorted([zed, "usr_bob"]))
    assert resolved.new == ((zed, "zed@y.io"),)


def test_resolve_new_is_sorted() -> None:
    resolved = _resolve(["b@y.io", "a@y.io", "c@y.io"])
    assert list(resolved.new) == sorted(resolved.new)
    assert len(resolved.new) == 3
    assert resolved.ids == tuple(sorted(pair[0] for pair in resolved.new))


def test_resolve_unknown_email_refused() -> None:
    with pytest.raises(ValidationFailed) as info:
        _resolve(["ada@x.io", "zed@y.io"], allow_unknown=False)
    assert info.value.code == "unknown_attendee"
    assert info.value.extra == {"field": "attendees", "attendee": "zed@y.io"}


def test_resolve_unknown_id_refused() -> None:
    with pytest.raises(ValidationFailed) as info:
        _resolve(["usr_nobody"], allow_unknown=False)
    assert info.value.code == "unknown_attendee"
    assert info.value.extra == {"field": "attendees", "attendee": "usr_nobody"}


def test_resolve_unknown_id_taken_as_is_when_allowed() -> None:
    assert _resolve(["usr_nobody"]) == ResolvedAttendees(ids=("usr_nobody",), new=())


def test_resolve_known_ids_pass_without_allow_unknown() -> None:
    resolved = _resolve(["usr_bob", "ada@x.io"], allow_unknown=False)
    assert resolved.ids == ("usr_ada", "usr_bob")


def test_resolve_already_registered_derived_id_is_not_new() -> None:
    zed = attendee_id_for_email("t1", "zed@y.io")
    for allow in (True, False):
        resolved = resolve_attendees(
            "t1",
            parse_attendees(["zed@y.io"]),
            directory={},
            known_ids={zed},
            allow_unknown=allow,
        )
        assert resolved == ResolvedAttendees(ids=(zed,), new=())


def test_resolve_derived_ids_are_per_tenant() -> None:
    refs = parse_attendees(["zed@y.io"])
    one = resolve_attendees("t1", refs, directory={}, known_ids=(), allow_unknown=True)
    two = resolve_attendees("t2", refs, directory={}, known_ids=(), allow_unknown=True)
    assert one.ids != two.ids


def test_values_are_frozen() -> None:
    ref = AttendeeRef("id", "usr_1")
    with pytest.raises(AttributeError):
        ref.value = "usr_2"  # type: ignore[misc]
