"""One mailbox, one string: the normalization of an email address.

Two spellings of one mailbox must be one attendee, or the person is booked
twice. The rule, applied to the whole address:

1. Surrounding whitespace is trimmed.
2. Text folding: Unicode canonical caseless matching (Unicode 3.13, D145:
   NFD, full case folding, NFD again), then every U+0307 COMBINING DOT ABOVE
   that follows a Latin ``i`` or ``j`` with no starter or other above-mark in
   between is removed, then NFC. Case folding a decomposed string is what
   makes ``josé`` (NFC) and ``jose`` + U+0301 (NFD) one string, and the NFC at
   the end is needed because case folding does not keep a string NFC. The dot
   rule exists for ``İ``: it folds to ``i`` + U+0307, which is not ``i`` to
   Unicode but is to a reader (a soft-dotted letter shows one dot whether or
   not the dot above is there), so ``DİANA`` and ``diana`` are one mailbox.
   Dotless i (U+0131) stays its own letter (the default folding, not the Turkic
   one). Full folding also makes ``ß`` ``ss`` and a final sigma a middle one,
   in the domain too, as before this rule: ``faß.de`` and ``fass.de`` stay
   one domain, and the addresses stored before keep their meaning.
3. The domain is an IDNA 2008 domain name (the ``idna`` package, with the
   UTS #46 non-transitional mapping of width variants and ideographic full
   stops), stored as A-labels (``xn--bcher-kva.example``), lower case,
   without a trailing dot. A-labels are the form IDNA defines identity on and
   the DNS uses; they are ASCII, so the stored domain depends on no further
   Unicode normalization and a look-alike domain (``example.com`` with a
   Cyrillic ``a``) is visibly a different string. An A-label in the input is
   decoded and folded like a U-label, so both spellings meet.

An address that does not have the shape ``local@domain`` (one ``@``, a
non-empty local part, two or more non-empty domain labels, no whitespace,
control or format character, ``<``, ``>`` or ``"``, at most 254 characters
once normalized) is ``invalid_attendee``; a domain IDNA 2008 refuses (a disallowed
code point, a hyphen misplaced, a label over 63 octets, a broken A-label) is
``invalid_email_domain``. Both are ValidationFailed.
"""

from __future__ import annotations

import re
import unicodedata
from typing import Final

import idna

from slotward.engine.errors import ValidationFailed

__all__ = ["MAX_EMAIL", "fold_text", "normalize_email"]

MAX_EMAIL: Final = 254
# Longer input is refused before any Unicode work: no address folds from
# over 1024 characters to 254 but one padded with ignorable characters.
_MAX_INPUT: Final = 1024
_DOT_ABOVE: Final = "\u0307"
_SOFT_DOTTED: Final = frozenset("ij")
_ABOVE: Final = 230
_FORBIDDEN: Final = frozenset('<>"')
# A lower-case LDH name that IDNA 2008 takes as it is: no A-label, no
# hyphen at either end of a label or in its 3rd and 4th places.
_LDH_LABEL: Final = r"(?!..--)[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
_PLAIN_DOMAIN: Final = re.compile(rf"(?:{_LDH_LABEL}\.)+{_LDH_LABEL}", re.ASCII)
_MAX_DOMAIN: Final = 253


def normalize_email(value: str) -> str:
    """The one stored form of the mailbox ``value`` names (see the module).

    Raises ``ValidationFailed``: ``invalid_attendee`` for a string that is not
    an address, ``invalid_email_domain`` for a domain IDNA 2008 refuses.
    """
    text = value.strip()
    if len(text) > _MAX_INPUT:
        raise _invalid(value, "longer than an email address can be")
    folded = text.lower() if text.isascii() else fold_text(text)
    local, at, domain = folded.partition("@")
    if at != "@" or local == "" or "@" in domain:
        raise _invalid(value)
    if not _clean(folded):
        raise _invalid(value)
    email = f"{local}@{_domain(domain, value)}"
    if len(email) > MAX_EMAIL:
        raise _invalid(value, f"longer than {MAX_EMAIL} characters once normalized")
    return email


def fold_text(text: str) -> str:
    """Canonical caseless folding, the dot above a soft-dotted letter dropped, NFC."""
    folded = unicodedata.normalize("NFD", unicodedata.normalize("NFD", text).casefold())
    return unicodedata.normalize("NFC", _drop_soft_dots(folded))


def _drop_soft_dots(text: str) -> str:
    """Remove U+0307 after ``i``/``j`` (Unicode's After_Soft_Dotted context).

    ``text`` is NFD, so marks are in canonical order and any mark classed
    below "above" (230) sits before the dot. A dot removed does not block the
    next one: all of them go, so the rule is idempotent.
    """
    if _DOT_ABOVE not in text:
        return text
    out: list[str] = []
    soft = False
    for c in text:
        if c == _DOT_ABOVE and soft:
            continue
        ccc = unicodedata.combining(c)
        if ccc == 0:
            soft = c in _SOFT_DOTTED
        elif ccc == _ABOVE:
            soft = False
        out.append(c)
    return "".join(out)


def _domain(domain: str, value: str) -> str:
    """The A-label form of a folded domain, without a trailing dot."""
    name = domain.removesuffix(".")
    if len(name) <= _MAX_DOMAIN and _PLAIN_DOMAIN.fullmatch(name):
        return name
    try:
        # UTS #46 first, so full-width dots split labels as ASCII ones do.
        mapped = idna.uts46_remap(domain, std3_rules=True, transitional=False)
        labels = mapped.removesuffix(".").split(".")
        if len(labels) < 2 or "" in labels:
            raise _invalid(value)
        unicode = idna.decode(mapped, uts46=True, std3_rules=True)
        ascii_form = idna.encode(fold_text(unicode), uts46=True, std3_rules=True)
    except UnicodeError as exc:  # idna.IDNAError and its kinds are UnicodeErrors
        raise ValidationFailed(
            f"the domain of {_shown(value)} is not a valid IDNA 2008 domain name: "
            f"{_shown(str(exc))}",
            code="invalid_email_domain",
            extra={"field": "attendees"},
        ) from exc
    return ascii_form.decode("ascii").removesuffix(".")


def _bad_char(c: str) -> bool:
    return c.isspace() or not c.isprintable() or c in _FORBIDDEN


# The ASCII characters _bad_char lets through: printable, not a space, not <>".
_CLEAN_ASCII: Final = re.compile(r"[\x21\x23-\x3b\x3d\x3f-\x7e]*")


def _clean(text: str) -> bool:
    """No character of ``text`` is bad: one regex for ASCII (most addresses), else each."""
    if text.isascii():
        return _CLEAN_ASCII.fullmatch(text) is not None
    return not any(_bad_char(c) for c in text)


def _shown(value: str) -> str:
    # Echo the input back, but never a kilobyte of it.
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _invalid(value: str, why: str | None = None) -> ValidationFailed:
    detail = f"not a valid email address: {_shown(value)}"
    return ValidationFailed(
        detail if why is None else f"{detail} ({why})",
        code="invalid_attendee",
        extra={"field": "attendees"},
    )
