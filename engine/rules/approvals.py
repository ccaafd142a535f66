"""The rules of approvals: what a request may carry, how an approval moves, and
which commits a tenant's policy sends to a person.

The state machine is a table, as the hold's is (engine/rules/holds.py):
``pending`` moves to ``approved``, ``denied`` or ``expired``, once; the same
decision again changes nothing (the caller replays its first answer), the
other one is ``approval_decided``, and anything after the expiry is
``approval_expired``.
"""

from __future__ import annotations

import math
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any, Final, Literal

from slotward.engine.approvals import HOLD_COMMIT, Approval, ApprovalRules, ApprovalStatus
from slotward.engine.errors import Conflict, ValidationFailed
from slotward.engine.model import Hold
from slotward.engine.rules.emails import normalize_email
from slotward.engine.rules.fingerprint import canonical_json

__all__ = [
    "DEFAULT_EXPIRY",
    "MAX_ACTION_BYTES",
    "MAX_EVIDENCE_BYTES",
    "MAX_EXPIRY",
    "MAX_NOTE",
    "MAX_SUMMARY",
    "MIN_EXPIRY",
    "Decision",
    "apply_decision",
    "check_action",
    "check_evidence",
    "check_note",
    "check_summary",
    "expire",
    "gate_summary",
    "matched_rules",
    "parse_rules",
    "rules_document",
]

MAX_SUMMARY: Final = 200
MAX_NOTE: Final = 1000
MAX_EVIDENCE_BYTES: Final = 32 * 1024
MAX_ACTION_BYTES: Final = 4 * 1024
MIN_EXPIRY: Final = timedelta(seconds=60)
MAX_EXPIRY: Final = timedelta(days=7)
DEFAULT_EXPIRY: Final = timedelta(hours=24)

DecisionKind = Literal["approve", "deny"]


@dataclass(frozen=True)
class Decision:
    """A reviewer's decision: ``approve`` or ``deny``, by agent ``by``, with a note."""

    kind: DecisionKind
    by: str
    note: str | None = None


_TARGET: Final[dict[DecisionKind, ApprovalStatus]] = {
    "approve": ApprovalStatus.APPROVED,
    "deny": ApprovalStatus.DENIED,
}


def apply_decision(approval: Approval, decision: Decision, now: datetime) -> tuple[Approval, bool]:
    """The approval after ``decision``, and whether it changed.

    The same decision again changes nothing (its first answer is replayed);
    the other decision is ``approval_decided``; any decision once the approval
    has expired (as seen at ``now``) is ``approval_expired``.
    """
    seen = approval.status_at(now)
    target = _TARGET[decision.kind]
    if seen is ApprovalStatus.EXPIRED:
        raise Conflict(
            "the approval expired before anyone decided; the agent must ask again",
            code="approval_expired",
        )
    if seen is target:
        return approval, False
    if seen is not ApprovalStatus.PENDING:
        raise Conflict(
            f"the approval was already {seen.value}; a decision is recorded once",
            code="approval_decided",
            extra={"status": seen.value},
        )
    moved = replace(
        approval, status=target, decided_by=decision.by, decided_at=now, note=decision.note,
        updated_at=now,
    )  # fmt: skip
    return moved, True


def expire(approval: Approval, now: datetime) -> tuple[Approval, bool]:
    """Mark a pending approval past its expiry expired (the sweeper's catch-up)."""
    if approval.status is not ApprovalStatus.PENDING or approval.expires_at > now:
        return approval, False
    return replace(approval, status=ApprovalStatus.EXPIRED, updated_at=now), True


# -- what a request may carry ----------------------------------------------------


def _invalid(detail: str, field: str) -> ValidationFailed:
    return ValidationFailed(detail, code="invalid_field", extra={"field": field})


def _one_line(text: str) -> bool:
    # Cc (controls, newlines, tabs), Zl and Zp (line and paragraph separators).
    return not any(unicodedata.category(c) in ("Cc", "Zl", "Zp") for c in text)


def check_summary(value: str) -> str:
    """A summary: one line of 1-200 characters, not only spaces."""
    if not value.strip() or len(value) > MAX_SUMMARY or not _one_line(value):
        raise _invalid(
            f"summary must be one line of 1 to {MAX_SUMMARY} characters "
            "(no newline, tab or control character)",
            "summary",
        )
    return value


def check_note(value: str | None) -> str | None:
    """A reviewer's note: at most 1000 characters (lines allowed), or none."""
    if value is not None and len(value) > MAX_NOTE:
        raise _invalid(f"note must be at most {MAX_NOTE} characters", "note")
    return value


def _size(value: object) -> int:
    return len(canonical_json([value])) - 2  # without the array's brackets


def check_evidence(value: object) -> Any:
    """Any JSON value of at most 32 KiB as canonical JSON."""
    if _size(value) > MAX_EVIDENCE_BYTES:
        raise _invalid(
            f"evidence must be at most {MAX_EVIDENCE_BYTES} bytes as canonical JSON", "evidence"
        )
    return value


def check_action(value: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """An action: an object with a string ``type``; ``hold.commit`` takes a ``hold_id`` only."""
    if value is None:
        return None
    kind = value.get("type")
    if not isinstance(kind, str) or not 1 <= len(kind) <= 100:
        raise _invalid("action.type must be a string of 1 to 100 characters", "action.type")
    if kind == HOLD_COMMIT:
        hold_id = value.get("hold_id")
        if set(value) != {"type", "hold_id"} or not isinstance(hold_id, str):
            raise _invalid(
                f'a {HOLD_COMMIT!r} action is exactly {{"type", "hold_id"}} with a string hold_id',
                "action",
            )
    elif _size(value) > MAX_ACTION_BYTES:
        raise _invalid(f"action must be at most {MAX_ACTION_BYTES} bytes as canonical JSON",
                       "action")  # fmt: skip
    return dict(value)


# -- the tenant's policy ---------------------------------------------------------------

_RULE_FIELDS: Final = (
    "attendees_more_than", "longer_than_minutes", "priority_at_least", "outside_domains"
)  # fmt: skip
MAX_DOMAINS: Final = 100


def parse_rules(raw: Mapping[str, Any]) -> ApprovalRules:
    """The rules of a ``require_approval`` object, already of the right JSON types.

    Domains are normalized as an email's domain is (IDNA 2008 A-labels, lower
    case), deduplicated and sorted.
    """
    domains = raw.get("outside_domains")
    return ApprovalRules(
        attendees_more_than=raw.get("attendees_more_than"),
        longer_than_minutes=raw.get("longer_than_minutes"),
        priority_at_least=raw.get("priority_at_least"),
        outside_domains=None if domains is None else _domains(domains),
    )


def _domains(values: Sequence[str]) -> tuple[str, ...]:
    field = "require_approval.outside_domains"
    if len(values) > MAX_DOMAINS:
        raise _invalid(f"at most {MAX_DOMAINS} domains", field)
    out = set()
    for value in values:
        try:
            out.add(normalize_email(f"x@{value.strip().removeprefix('@')}").partition("@")[2])
        except ValidationFailed as error:
            raise ValidationFailed(
                f"not a domain name: {value[:80]!r}", code=error.code, extra={"field": field}
            ) from None
    return tuple(sorted(out))


def rules_document(rules: ApprovalRules) -> dict[str, Any]:
    """The rules as ``GET /v1/approval-policy`` shows them: only the rules set."""
    doc: dict[str, Any] = {}
    for name in _RULE_FIELDS:
        value = getattr(rules, name)
        if value is not None:
            doc[name] = list(value) if isinstance(value, tuple) else value
    return doc


def _inside(emails: Sequence[str], domains: Sequence[str]) -> bool:
    return any(
        e.partition("@")[2] == d or e.partition("@")[2].endswith("." + d)
        for e in emails
        for d in domains
    )


def matched_rules(
    rules: ApprovalRules, hold: Hold, emails: Mapping[str, Sequence[str]]
) -> list[str]:
    """Why ``hold``'s commit needs an approval under ``rules``: one line per rule it
    matches (none: it does not). ``emails`` are the attendees' known emails."""
    reasons = []
    if rules.attendees_more_than is not None and len(hold.attendees) > rules.attendees_more_than:
        reasons.append(f"{len(hold.attendees)} attendees (more than {rules.attendees_more_than})")
    minutes = (hold.end - hold.start).total_seconds() / 60
    if rules.longer_than_minutes is not None and minutes > rules.longer_than_minutes:
        reasons.append(f"{_minutes(minutes)} minutes (longer than {rules.longer_than_minutes})")
    if rules.priority_at_least is not None and hold.priority >= rules.priority_at_least:
        reasons.append(f"priority {hold.priority} (at least {rules.priority_at_least})")
    if rules.outside_domains is not None:
        outside = [
            a for a in hold.attendees if not _inside(emails.get(a, ()), rules.outside_domains)
        ]
        if outside:
            reasons.append(f"attendees outside {', '.join(rules.outside_domains)}: "
                           f"{', '.join(outside)}")  # fmt: skip
    return reasons


def _minutes(value: float) -> str:
    return str(int(value)) if value == math.floor(value) else f"{value:.1f}"


def gate_summary(hold: Hold) -> str:
    """The summary of the approval a policy opens for ``hold``'s commit: one line."""
    head = f"Commit {hold.title!r}" if hold.title else f"Commit hold {hold.id}"
    start, end = hold.start.astimezone(UTC), hold.end.astimezone(UTC)
    until = f"{end:%H:%M}" if end.date() == start.date() else f"{end:%Y-%m-%d %H:%M}"
    people = f"{len(hold.attendees)} attendee{'s' if len(hold.attendees) > 1 else ''}"
    line = f"{head}: {start:%Y-%m-%d %H:%M}–{until} UTC, {people}"
    line = "".join(" " if not _one_line(c) else c for c in line)  # a title may hold a tab
    return line if len(line) <= MAX_SUMMARY else line[: MAX_SUMMARY - 1] + "…"
