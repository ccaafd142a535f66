"""Properties of email normalization: one mailbox, one string, whatever the spelling."""

from __future__ import annotations

import unicodedata
from collections.abc import Callable

import idna
import pytest
from hypothesis import assume, example, given
from hypothesis import strategies as st

from slotward.api.http.statuses import status_of
from slotward.engine.errors import ValidationFailed
from slotward.engine.rules import emails
from slotward.engine.rules.attendees import attendee_id_for_email, normalize_email
from slotward.engine.rules.emails import fold_text

REFUSALS = {"invalid_attendee", "invalid_email_domain"}

# Letters where folding and normalization disagree or surprise: composed and
# combining accents, the dotted and dotless i of Turkish, sharp s, final sigma,
# a combining mark that case-folds to a starter (U+0345), marks below and
# above, a letter whose folding is decomposed (U+01F0), full-width letters.
TRICKY = (
    "aeijoszEIJOSZ\u00e9\u00c9\u0130\u0131\u00df\u1e9e\u03c2\u03a3"
    "\u0345\u0301\u0307\u0323\u01f0\ufb03\uff21\u00fc\u00dc"
)
# Dotless i is left out of spellings: it is its own letter, but its upper case
# is I, which folds to i (the default, not the Turkic, folding).
LOCAL = st.text(alphabet=TRICKY.replace("\u0131", "") + "0123456789._-+", min_size=1, max_size=12)
LABEL = st.text(
    alphabet="abcxyz09-" + "\u00e9\u00fc\u00df\u0130I\u03c2\u00c9\u0301\u0307",
    min_size=1,
    max_size=10,
)
DOMAIN = st.lists(LABEL, min_size=1, max_size=3).map(lambda ls: ".".join([*ls, "example"]))


def _normalized_or_none(value: str) -> str | None:
    try:
        return normalize_email(value)
    except ValidationFailed as exc:
        refusal = exc.code
    assert refusal in REFUSALS
    return None


@st.composite
def addresses(draw: st.DrawFn) -> str:
    """A valid address, as some client might spell it."""
    value = f"{draw(LOCAL)}@{draw(DOMAIN)}"
    assume(_normalized_or_none(value) is not None)
    return value


def _a_label_domain(value: str) -> str:
    local, _, domain = value.rpartition("@")
    return f"{local}@{idna.encode(domain, uts46=True).decode('ascii')}"


def _nfc(value: str) -> str:
    return unicodedata.normalize("NFC", value)


def _nfd(value: str) -> str:
    return unicodedata.normalize("NFD", value)


# Case variants are taken of a normalized string: upper-casing text whose marks
# are out of canonical order (U+0345 before U+0301) changes more than case.
VARIANTS: dict[str, Callable[[str], str]] = {
    "nfc": _nfc,
    "nfd": _nfd,
    "upper": lambda v: _nfc(v).upper(),
    "swapcase": lambda v: _nfc(v).swapcase(),
    "trailing-dot": lambda v: v + ".",
    "padded": lambda v: f"  {v}\t",
    "nfd-upper-dot": lambda v: _nfd(_nfd(v).upper()) + ".",
}


ANY_TEXT = st.one_of(
    st.text(max_size=40),
    st.builds("{}@{}.{}".format, st.text(max_size=10), st.text(max_size=10), st.text(max_size=5)),
)


@given(ANY_TEXT)
@example("DİANA@example.com")
@example("a@xn--i-9bb.example")
@example("\u0345@x.io")
def test_any_text_is_refused_cleanly_or_normalized_to_a_fixpoint(value: str) -> None:
    first = _normalized_or_none(value)
    if first is not None:
        assert normalize_email(first) == first
        assert unicodedata.is_normalized("NFC", first)


@given(addresses())
@example("josé@bücher.example")
@example("DİANA@DİANA.example")
@example("STRAẞE@faß.example")
def test_normalization_is_idempotent_and_nfc(value: str) -> None:
    once = normalize_email(value)
    assert normalize_email(once) == once
    assert unicodedata.is_normalized("NFC", once)
    assert once == once.strip()
    assert not once.endswith(".")
    assert once.rpartition("@")[2].isascii()  # the domain is stored as A-labels


@pytest.mark.parametrize("variant", list(VARIANTS))
@given(value=addresses())
@example(value="josé@bücher.example")
@example(value="Diana@xn--bcher-kva.example")
def test_spelling_variants_are_one_mailbox(variant: str, value: str) -> None:
    spelled = VARIANTS[variant](value)
    assert normalize_email(spelled) == normalize_email(value)
    assert attendee_id_for_email("t", spelled) == attendee_id_for_email("t", value)


@given(addresses())
def test_the_a_label_spelling_of_the_domain_is_the_same_mailbox(value: str) -> None:
    try:
        spelled = _a_label_domain(value)
    except idna.IDNAError:  # uts46 alone, without the folding, may refuse
        assume(False)
    assert normalize_email(spelled) == normalize_email(value)


@given(st.text(alphabet=TRICKY, max_size=12))
def test_folding_is_idempotent_and_nfc(text: str) -> None:
    folded = fold_text(text)
    assert fold_text(folded) == folded
    assert unicodedata.is_normalized("NFC", folded)


@given(st.text(alphabet=TRICKY.replace("\u0131", ""), max_size=12))
def test_folding_is_case_and_form_blind(text: str) -> None:
    folded = fold_text(text)
    for form in (_nfc(text), _nfd(text)):
        for other in (form, form.upper(), form.lower(), form.swapcase()):
            assert fold_text(other) == folded


@given(
    st.lists(st.from_regex(r"[a-z0-9][a-z0-9-]{0,64}", fullmatch=True), min_size=2, max_size=4).map(
        ".".join
    )
)
def test_the_ascii_shortcut_agrees_with_idna(domain: str) -> None:
    """The plain-LDH shortcut must say what the idna package says."""
    try:
        expected: str | None = idna.encode(domain, uts46=True, std3_rules=True).decode("ascii")
    except idna.IDNAError:
        expected = None
    plain = len(domain) <= 253 and emails._PLAIN_DOMAIN.fullmatch(domain) is not None
    if plain:
        assert expected == domain
    assert _normalized_or_none(f"a@{domain}") == (None if expected is None else f"a@{expected}")


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ("josé@example.com", unicodedata.normalize("NFD", "josé@example.com")),
        ("josé@example.com", "JOSÉ@EXAMPLE.COM."),
        ("ana@bücher.example", "ana@xn--bcher-kva.example"),
        ("ana@bücher.example", "ANA@XN--BCHER-KVA.EXAMPLE."),
        ("DİANA@example.com", "diana@example.com"),
        (unicodedata.normalize("NFD", "DİANA@example.com"), "diana@example.com"),
        ("i\u0307\u0307@example.com", "i@example.com"),
        ("\u1ecb\u0307@x.io", "\u1ecb@x.io"),  # the dot below comes first in NFD
        ("ana@ｅｘａｍｐｌｅ．com", "ana@example.com"),
        ("ana@example.com。", "ana@example.com"),
        ("strasse@x.io", "STRAẞE@x.io"),
        ("ana@fass.de", "ana@faß.de"),  # full folding, as stored before this rule
    ],
)
def test_the_issue_s_spellings_are_one_mailbox(one: str, other: str) -> None:
    assert normalize_email(one) == normalize_email(other)


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ("ana@example.com", "ana@ex\u0430mple.com"),  # a Cyrillic a: another domain
        ("i\u0301@x.io", "i@x.io"),  # an accent is not a dot
        ("\u0131@x.io", "i@x.io"),  # dotless i is another letter
        ("ana@example.com", "an\u0430@example.com"),
    ],
)
def test_different_mailboxes_stay_apart(one: str, other: str) -> None:
    assert normalize_email(one) != normalize_email(other)


@pytest.mark.parametrize(
    ("value", "stored"),
    [
        ("josé@bücher.example", "josé@xn--bcher-kva.example"),
        ("DİANA@Example.COM.", "diana@example.com"),
        ("a@İ.example", "a@i.example"),
        ("a@xn--i-9bb.example", "a@i.example"),
    ],
)
def test_the_stored_form(value: str, stored: str) -> None:
    assert normalize_email(value) == stored


@pytest.mark.parametrize(
    "value",
    ["a@ab--c.example", "a@xn--zz.example", "a@x_y.example", "a@-x.example",
     "a@[192.0.2.1]", "a@" + "x" * 64 + ".example"],
)  # fmt: skip
def test_domains_idna_2008_refuses_are_a_422_with_their_own_code(value: str) -> None:
    with pytest.raises(ValidationFailed) as info:
        normalize_email(value)
    assert info.value.code == "invalid_email_domain"
    assert status_of(info.value) == 422
    assert len(info.value.detail) < 300


def test_a_long_input_is_refused_before_any_unicode_work() -> None:
    with pytest.raises(ValidationFailed) as info:
        normalize_email("a@" + "\u00ad" * 5000 + "x.io")
    assert info.value.code == "invalid_attendee"


def test_the_ascii_shortcut_lets_through_exactly_what_the_character_rule_does() -> None:
    from slotward.engine.rules.emails import _bad_char, _clean

    for code in range(128):
        c = chr(code)
        assert _clean(f"a{c}b") is not _bad_char(c), repr(c)
    assert _clean("ann@example.com")
    assert not _clean("ann\u00a0@example.com")  # a non-ASCII space: the per-character rule
    assert _clean("zoë@example.com")
