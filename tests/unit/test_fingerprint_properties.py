"""Property tests: every spelling of one intent gives one key, and only it.

A hold request is generated as its meaning (a set of people, a start, a length)
and then spelled at random: Z, numeric offsets or local time plus a timezone;
end, duration_minutes or an ISO duration; ids and emails in any case, padded,
in ``Name <email>`` form, duplicated and shuffled; keys in any order; with or
without free-text thoughts.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import rfc8785
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

from slotward.engine.errors import ValidationFailed
from slotward.engine.rules.attendees import parse_attendees, resolve_attendees
from slotward.engine.rules.fingerprint import (
    DEFAULT_THOUGHT_FIELDS,
    canonical_json,
    derive_key,
    hold_intent,
    intent_fingerprint,
    strip_thoughts,
)
from slotward.engine.rules.timenorm import normalize_interval

SETTINGS = settings(max_examples=150, deadline=None)
QUICK = settings(max_examples=100, deadline=None)

ZONES = [
    "Europe/Berlin",
    "America/New_York",
    "America/St_Johns",
    "Asia/Kolkata",
    "Australia/Lord_Howe",
    "Pacific/Chatham",
    "UTC",
]
# Each person is an id, a directory entry reachable by several aliases, or an
# email nobody registered yet.
DIRECTORY = {
    "ada@example.com": "usr_ada",
    "ada.lovelace@example.com": "usr_ada",
    "bob@example.org": "usr_bob",
}
KNOWN_IDS = {"usr_ada", "usr_bob", "usr_carol", "usr_dan", "Usr_Eve"}
PEOPLE: dict[str, tuple[str, ...]] = {
    "usr_ada": ("usr_ada", "ada@example.com", "ada.lovelace@example.com"),
    "usr_bob": ("usr_bob", "bob@example.org"),
    "usr_carol": ("usr_carol",),
    "usr_dan": ("usr_dan",),
    "Usr_Eve": ("Usr_Eve",),
    "zed": ("zed@unknown.test",),
    "yu": ("yu.li@unknown.test",),
}


@dataclass(frozen=True)
class Meaning:
    people: frozenset[str]
    start: datetime
    minutes: int

    @property
    def end(self) -> datetime:
        return self.start + timedelta(minutes=self.minutes)


instants = st.builds(
    lambda dt, micro: dt.replace(tzinfo=UTC, microsecond=micro),
    st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2037, 12, 31)),
    st.sampled_from([0, 0, 0, 500_000, 1, 123_456]),
)
meanings = st.builds(
    Meaning,
    people=st.frozensets(st.sampled_from(sorted(PEOPLE)), min_size=1),
    start=instants,
    minutes=st.integers(min_value=1, max_value=24 * 60),
)


def key_of(request: dict[str, Any], *, tenant: str = "t1", step: int | None = None) -> str:
    """What the service does with a place_hold call, end to end."""
    args = strip_thoughts(request, DEFAULT_THOUGHT_FIELDS)
    refs = parse_attendees(args["attendees"])
    resolved = resolve_attendees(
        tenant, refs, directory=DIRECTORY, known_ids=KNOWN_IDS, allow_unknown=True
    )
    interval = normalize_interval(
        start=args["start"],
        end=args.get("end"),
        duration_minutes=args.get("duration_minutes"),
        duration=args.get("duration"),
        timezone=args.get("timezone"),
    )
    intent = hold_intent(resolved.ids, interval)
    return derive_key(tenant=tenant, workflow="wf-1", tool="place_hold", intent=intent, step=step)


# Spelling strategies


def _fraction(draw: st.DrawFn, micro: int) -> str:
    if micro == 0:
        return draw(st.sampled_from(["", ".0", ".000000"]))
    six = f"{micro:06d}"
    return "." + draw(st.sampled_from([six, six.rstrip("0"), six + "000"]))


def _wall(draw: st.DrawFn, wall: datetime) -> str:
    sep = draw(st.sampled_from(["T", " "]))
    text = f"{wall:%Y-%m-%d}{sep}{wall:%H:%M}"
    if wall.second or wall.microsecond or draw(st.booleans()):
        text += f":{wall:%S}" + _fraction(draw, wall.microsecond)
    return text


def _offset(draw: st.DrawFn, minutes: int) -> str:
    if minutes == 0 and draw(st.booleans()):
        return "Z"
    sign = "-" if minutes < 0 or (minutes == 0 and draw(st.booleans())) else "+"
    hh, mm = divmod(abs(minutes), 60)
    forms = [f"{sign}{hh:02d}:{mm:02d}", f"{sign}{hh:02d}{mm:02d}"]
    if mm == 0:
        forms.append(f"{sign}{hh:02d}")
    return draw(st.sampled_from(forms))


def _is_ambiguous(local: datetime) -> bool:
    return local.replace(fold=0).utcoffset() != local.replace(fold=1).utcoffset()


def spell_instant(draw: st.DrawFn, instant: datetime, zone: str | None) -> str:
    """Z, a random numeric offset, or (when a zone is given) its local time."""
    kind = draw(st.sampled_from(["offset", "local"] if zone else ["offset"]))
    if kind == "local" and zone is not None:
        local = instant.astimezone(ZoneInfo(zone))
        if not _is_ambiguous(local):
            return _wall(draw, local)
    minutes = draw(st.integers(min_value=-14 * 60, max_value=14 * 60))
    shifted = instant.astimezone(timezone(timedelta(minutes=minutes)))
    return _wall(draw, shifted) + _offset(draw, minutes)


def _spell_duration(draw: st.DrawFn, minutes: int) -> str:
    hours, rest = divmod(minutes, 60)
    forms = [f"PT{minutes}M", f"PT{minutes * 60}S", f"PT0H{minutes}M0S"]
    forms.append(f"PT{hours}H{rest}M" if rest else f"PT{hours}H")
    return draw(st.sampled_from(forms))


def spell_end(draw: st.DrawFn, meaning: Meaning, zone: str | None) -> dict[str, Any]:
    kind = draw(st.sampled_from(["end", "duration_minutes", "duration"]))
    if kind == "end":
        return {"end": spell_instant(draw, meaning.end, zone)}
    if kind == "duration_minutes":
        return {"duration_minutes": meaning.minutes}
    return {"duration": _spell_duration(draw, meaning.minutes)}


def _random_case(draw: st.DrawFn, text: str) -> str:
    flips = draw(st.lists(st.booleans(), min_size=len(text), max_size=len(text)))
    return "".join(c.upper() if flip else c for c, flip in zip(text, flips, strict=True))


def spell_attendee(draw: st.DrawFn, person: str) -> str:
    entry = draw(st.sampled_from(PEOPLE[person]))
    pad = st.sampled_from(["", " ", "  ", "\t", "\n"])
    if "@" in entry:
        entry = _random_case(draw, entry)
        if draw(st.booleans()):
            name = draw(st.sampled_from(["Ada", "Dr. Who", '"Li, Yu"', ""]))
            entry = f"{name} <{draw(pad)}{entry}{draw(pad)}>"
    return draw(pad) + entry + draw(pad)


def spell_attendees(draw: st.DrawFn, people: frozenset[str]) -> list[str]:
    entries = [
        spell_attendee(draw, person)
        for person in sorted(people)
        for _ in range(draw(st.integers(min_value=1, max_value=3)))
    ]
    return draw(st.permutations(entries))


def _shuffled(draw: st.DrawFn, doc: dict[str, Any]) -> dict[str, Any]:
    keys = draw(st.permutations(list(doc)))
    return {k: doc[k] for k in keys}


@st.composite
def instant_spellings(draw: st.DrawFn, instant: datetime, zone: str | None) -> str:
    """One random spelling of ``instant``."""
    return spell_instant(draw, instant, zone)


@st.composite
def spellings(draw: st.DrawFn, meaning: Meaning) -> dict[str, Any]:
    """One random request that means ``meaning``."""
    zone = draw(st.none() | st.sampled_from(ZONES))
    request: dict[str, Any] = {
        "attendees": spell_attendees(draw, meaning.people),
        "start": spell_instant(draw, meaning.start, zone),
        **spell_end(draw, meaning, zone),
        "title": draw(st.sampled_from(["Sync", "sync!", "1:1 with Ada"])),
    }
    if zone is not None:
        request["timezone"] = zone
    for field in draw(st.sets(st.sampled_from(sorted(DEFAULT_THOUGHT_FIELDS)))):
        request[field] = draw(st.text(max_size=20))
    return _shuffled(draw, request)


# Properties


@SETTINGS
@given(st.data(), meanings)
def test_every_spelling_of_one_intent_gives_one_key(data: st.DataObject, meaning: Meaning) -> None:
    first = data.draw(spellings(meaning))
    second = data.draw(spellings(meaning))
    assert key_of(first) == key_of(second)


@QUICK
@given(st.data(), meanings, st.integers(min_value=-600, max_value=600).filter(bool))
def test_moving_the_start_changes_the_key(
    data: st.DataObject, meaning: Meaning, shift: int
) -> None:
    moved_start = meaning.start + timedelta(seconds=shift)
    assume(moved_start < meaning.end)
    request = data.draw(spellings(meaning))
    other = data.draw(spellings(meaning))
    zone = other.get("timezone")
    other.pop("duration_minutes", None)
    other.pop("duration", None)
    other["start"] = data.draw(instant_spellings(moved_start, zone))
    other["end"] = data.draw(instant_spellings(meaning.end, zone))
    assert key_of(request) != key_of(other)


@QUICK
@given(st.data(), meanings, st.integers(min_value=1, max_value=600))
def test_changing_the_end_changes_the_key(
    data: st.DataObject, meaning: Meaning, extra: int
) -> None:
    longer = Meaning(meaning.people, meaning.start, meaning.minutes + extra)
    assert key_of(data.draw(spellings(meaning))) != key_of(data.draw(spellings(longer)))


@QUICK
@given(st.data(), meanings, meanings)
def test_another_attendee_set_changes_the_key(
    data: st.DataObject, meaning: Meaning, other: Meaning
) -> None:
    assume(other.people != meaning.people)
    changed = Meaning(other.people, meaning.start, meaning.minutes)
    assert key_of(data.draw(spellings(meaning))) != key_of(data.draw(spellings(changed)))


@QUICK
@given(st.data(), meanings)
def test_tenant_and_step_are_part_of_the_key(data: st.DataObject, meaning: Meaning) -> None:
    request = data.draw(spellings(meaning))
    keys = {
        key_of(request),
        key_of(request, tenant="t2"),
        key_of(request, step=0),
        key_of(request, step=1),
    }
    assert len(keys) == 4


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**53) + 1, max_value=2**53 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=10),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4)
    ),
    max_leaves=25,
)


def _reorder(draw: st.DrawFn, doc: Any) -> Any:
    if isinstance(doc, dict):
        return _shuffled(draw, {k: _reorder(draw, v) for k, v in doc.items()})
    if isinstance(doc, list):
        return [_reorder(draw, v) for v in doc]
    return doc


@st.composite
def reorderings(draw: st.DrawFn, doc: dict[str, Any]) -> Any:
    """``doc`` with the keys of every object in a random order."""
    return _reorder(draw, doc)


@SETTINGS
@given(st.data(), st.dictionaries(st.text(max_size=5), json_values, max_size=6))
def test_key_order_never_matters(data: st.DataObject, intent: dict[str, Any]) -> None:
    reordered = data.draw(reorderings(intent))
    assert canonical_json(reordered) == canonical_json(intent)
    assert derive_key(
        tenant="t", workflow="w", tool="send_email", intent=reordered, step=3
    ) == derive_key(tenant="t", workflow="w", tool="send_email", intent=intent, step=3)
    assert intent_fingerprint(tenant="t", tool="x", intent=reordered) == intent_fingerprint(
        tenant="t", tool="x", intent=intent
    )


@QUICK
@given(st.text(min_size=1, max_size=12), st.data())
def test_moving_a_boundary_between_fields_changes_the_key(text: str, data: st.DataObject) -> None:
    cut_a = data.draw(st.integers(min_value=0, max_value=len(text)))
    cut_b = data.draw(st.integers(min_value=0, max_value=len(text)).filter(lambda c: c != cut_a))

    def key(cut: int) -> str:
        return derive_key(tenant=text[:cut], workflow=text[cut:], tool="t", intent={}, step=None)

    assert key(cut_a) != key(cut_b)


# Characters where encoders differ: controls, DEL, line separators, the edges of
# the BMP, lone surrogates (no canonical form) and astral ones (UTF-16 order).
_TRICKY = st.sampled_from(
    ["\x00", "\x08", "\x1f", '"', "\\", "\x7f", "\u2028", "\ud800", "\udfff", "\ue000",
     "\uffff", "\U0001f600", "\U00010000", "é"]
)  # fmt: skip
_TEXT = st.text(st.one_of(_TRICKY, st.characters()), max_size=6)
# Keys mostly of tricky characters, so orders by code point and by UTF-16 meet.
_KEYS = st.text(_TRICKY, min_size=1, max_size=3) | _TEXT
# Integers at the edges of exact doubles, where canonical JSON stops.
_EDGES = [2**53 - 1, 2**53, 1 - 2**53, -(2**53), 2**64]
_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-1000, max_value=1000) | st.sampled_from(_EDGES),
    st.floats(allow_nan=True, allow_infinity=True),
    _TEXT,
)
_DOCS = st.recursive(
    _LEAVES,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.tuples(inner, inner),
        st.dictionaries(_KEYS, inner, max_size=5),
    ),
    max_leaves=12,
)


def _reference(doc: Any) -> bytes | None:
    try:
        out: bytes = rfc8785.dumps(doc)
    except (rfc8785.CanonicalizationError, UnicodeEncodeError):  # the latter: a key's surrogate
        return None
    return out


@SETTINGS
@given(_DOCS)
# The cases where Python's encoder and RFC 8785 part: key order by UTF-16 units
# (an astral character sorts before U+E000 there), and integers past 2**53.
@example({"\ue000": 1, "\U0001f600": 2})
@example({"a": [2**53]})
def test_canonical_json_writes_what_rfc8785_writes(doc: Any) -> None:
    # canonical_json skips rfc8785 for plain documents (the hot path): whatever
    # it is given, it must answer rfc8785's bytes, or refuse what rfc8785 refuses.
    expected = _reference(doc)
    if expected is None:
        with pytest.raises(ValidationFailed):
            canonical_json(doc)
    else:
        assert canonical_json(doc) == expected
