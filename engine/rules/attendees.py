"""Attendee normalization: ids, emails and ``Name <email>`` entries to ids.

An entry containing ``@`` is an email (bare, or as ``Name <email>``); any
other entry is an attendee id. Emails are normalized to one string per
mailbox (engine/rules/emails.py: Unicode folding, IDNA 2008 domains as A-labels);
ids are trimmed and otherwise kept as sent (they are case-sensitive). Emails
map to ids through the tenant's directory; an email the directory does not
know gets an id derived from the tenant and the normalized email, so
computing an idempotency key never needs a write.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal

from slotward.engine.errors import ValidationFailed
from slotward.engine.rules.emails import normalize_email
from slotward.engine.rules.fingerprint import canonical_json

__all__ = [
    "MAX_ATTENDEES",
    "AttendeeRef",
    "ResolvedAttendees",
    "attendee_id_for_email",
    "normalize_email",
    "parse_attendees",
    "resolve_attendees",
]

MAX_ATTENDEES: Final = 100
_ID: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,127}", re.ASCII)
_NAMED: Final = re.compile(r"(?P<name>[^<>]*)<(?P<email>[^<>]*)>", re.DOTALL)


@dataclass(frozen=True)
class AttendeeRef:
    """One parsed attendee entry: an id or a normalized email.

    ``name`` is the display name of a ``Name <email>`` entry; it carries no
    identity.
    """

    kind: Literal["id", "email"]
    value: str
    name: str | None = None


@dataclass(frozen=True)
class ResolvedAttendees:
    """Attendee ids of a request, and the emails to register on first use.

    ``ids`` is sorted and deduplicated. ``new`` holds sorted, deduplicated
    ``(attendee_id, email)`` pairs for emails the directory did not know.
    """

    ids: tuple[str, ...]
    new: tuple[tuple[str, str], ...] = ()


def parse_attendees(entries: object) -> tuple[AttendeeRef, ...]:
    """Parse a list of 1-100 attendee entries, in order, duplicates kept.

    Raises ``ValidationFailed``: ``invalid_attendees`` when ``entries`` is not
    a list or has a wrong length, ``invalid_attendee`` (with the ``index``)
    for a bad entry.
    """
    if not isinstance(entries, list) or not 1 <= len(entries) <= MAX_ATTENDEES:
        raise ValidationFailed(
            f"attendees must be a list of 1 to {MAX_ATTENDEES} entries",
            code="invalid_attendees",
            extra={"field": "attendees"},
        )
    return tuple(_parse_entry(entry, index) for index, entry in enumerate(entries))


def attendee_id_for_email(tenant: str, email: str) -> str:
    """The deterministic attendee id of an email the directory does not know.

    ``att_`` + 32 hex digits of SHA-256 over the canonical JSON of the tenant
    and the email (normalized here too), so two tenants never share an id.
    The document is unchanged since the first release: an email whose
    normalized form did not change with a new rule keeps its id.
    """
    return _derive(tenant, normalize_email(email))


def _derive(tenant: str, normalized: str) -> str:
    doc = {"tenant": tenant, "email": normalized}
    return "att_" + hashlib.sha256(canonical_json(doc)).hexdigest()[:32]


def resolve_attendees(
    tenant: str,
    refs: Sequence[AttendeeRef],
    *,
    directory: Mapping[str, str],
    known_ids: Collection[str],
    allow_unknown: bool,
) -> ResolvedAttendees:
    """Map parsed attendees to ids of ``tenant``.

    ``directory`` maps normalized emails (aliases) to attendee ids;
    ``known_ids`` are the tenant's registered ids. An email outside the
    directory takes its derived id: registered already when that id is
    known, else listed in ``new`` if ``allow_unknown``. Without
    ``allow_unknown``, unknown emails and ids raise ``ValidationFailed``
    (``unknown_attendee``).
    """
    ids: set[str] = set()
    new: set[tuple[str, str]] = set()
    for ref in refs:
        if ref.kind == "id":
            if ref.value not in known_ids and not allow_unknown:
                raise _unknown_attendee(ref.value)
            ids.add(ref.value)
        elif ref.value in directory:
            ids.add(directory[ref.value])
        else:
            attendee_id = _derived_id(tenant, ref.value, known_ids, allow_unknown)
            if attendee_id not in known_ids:
                new.add((attendee_id, ref.value))
            ids.add(attendee_id)
    return ResolvedAttendees(ids=tuple(sorted(ids)), new=tuple(sorted(new)))


def _derived_id(tenant: str, email: str, known_ids: Collection[str], allow_unknown: bool) -> str:
    # A derived id already known was registered on an earlier first use.
    attendee_id = _derive(tenant, email)
    if attendee_id not in known_ids and not allow_unknown:
        raise _unknown_attendee(email)
    return attendee_id


def _parse_entry(entry: object, index: int) -> AttendeeRef:
    if not isinstance(entry, str):
        raise _invalid_attendee(
            f"attendees[{index}] must be a string, got {type(entry).__name__}", index
        )
    text = entry.strip()
    try:
        return _parse_text(text)
    except ValidationFailed as exc:
        exc.extra["index"] = index
        raise


def _parse_text(text: str) -> AttendeeRef:
    named = _NAMED.fullmatch(text)
    if named is not None:
        name = named["name"].strip().strip('"').strip()
        return AttendeeRef("email", normalize_email(named["email"]), name or None)
    if "@" in text:
        return AttendeeRef("email", normalize_email(text))
    if _ID.fullmatch(text) is None:
        raise _invalid_attendee(f"not an attendee id or email: {_shown(text)}")
    return AttendeeRef("id", text)


def _shown(value: str) -> str:
    # Echo the input back, but never a megabyte of it.
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _invalid_attendee(detail: str, index: int | None = None) -> ValidationFailed:
    extra: dict[str, object] = {"field": "attendees"}
    if index is not None:
        extra["index"] = index
    return ValidationFailed(detail, code="invalid_attendee", extra=extra)


def _unknown_attendee(value: str) -> ValidationFailed:
    return ValidationFailed(
        f"unknown attendee {_shown(value)}; this tenant does not register new attendees",
        code="unknown_attendee",
        extra={"field": "attendees", "attendee": value},
    )
