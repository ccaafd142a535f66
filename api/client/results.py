"""What the Python client answers with: frozen views of slotward's JSON documents.

Parsing is tolerant on purpose: a field the server adds later stays in ``.raw``
and never breaks an older client, and a field missing or of another type reads
as ``None`` (or empty) instead of raising. The server is the authority on what
a document holds; these classes only make the common fields easy to reach.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "Alternative",
    "Approval",
    "Availability",
    "Busy",
    "Conflict",
    "Hold",
    "Interval",
    "ToolAnswer",
]


def _str(doc: Mapping[str, Any], name: str) -> str | None:
    value = doc.get(name)
    return value if isinstance(value, str) else None


def _int(doc: Mapping[str, Any], name: str) -> int | None:
    value = doc.get(name)
    # bool is an int to Python, never to slotward's documents
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _dicts(value: object) -> list[dict[str, Any]]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _strs(value: object) -> tuple[str, ...]:
    return tuple(v for v in value if isinstance(v, str)) if isinstance(value, list) else ()


@dataclass(frozen=True)
class Interval:
    """A span ``[start, end)``, both ISO-8601 instants in UTC as the server wrote them."""

    start: str | None
    end: str | None
    raw: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def parse(cls, doc: Mapping[str, Any]) -> Interval:
        return cls(_str(doc, "start"), _str(doc, "end"), dict(doc))


@dataclass(frozen=True)
class Alternative(Interval):
    """A free slot of the refused call's duration that a conflict suggests instead."""

    @classmethod
    def parse(cls, doc: Mapping[str, Any]) -> Alternative:
        return cls(_str(doc, "start"), _str(doc, "end"), dict(doc))


@dataclass(frozen=True)
class Busy:
    """One busy interval of one attendee (``kind``: held, committed or external)."""

    attendee: str | None
    start: str | None
    end: str | None
    kind: str | None
    raw: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def parse(cls, doc: Mapping[str, Any]) -> Busy:
        return cls(
            _str(doc, "attendee"), _str(doc, "start"), _str(doc, "end"), _str(doc, "kind"),
            dict(doc),
        )  # fmt: skip


@dataclass(frozen=True)
class Conflict:
    """What stands in the way of a refused hold, one entry of ``slot_conflict``'s list.

    ``same_intent`` is true when another workflow already holds this very
    intent: an agent working for the same person may stand down.
    """

    attendee: str | None
    start: str | None
    end: str | None
    kind: str | None
    agent: str | None
    priority: int | None
    expires_at: str | None
    same_intent: bool
    raw: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def parse(cls, doc: Mapping[str, Any]) -> Conflict:
        return cls(
            attendee=_str(doc, "attendee"),
            start=_str(doc, "start"),
            end=_str(doc, "end"),
            kind=_str(doc, "kind"),
            agent=_str(doc, "agent"),
            priority=_int(doc, "priority"),
            expires_at=_str(doc, "expires_at"),
            same_intent=doc.get("same_intent") is True,
            raw=dict(doc),
        )


@dataclass(frozen=True)
class Hold:
    """A hold document, with what the answer's headers said about it.

    ``replayed`` is true when the server answered with the stored first answer
    (``Idempotent-Replayed: true``); then ``status_now`` is the hold's status at
    the time of the replay (``Slotward-Hold-Status``), which may differ from
    ``status``, the status in the first answer. On a first answer or a read,
    ``status_now`` is ``status``.
    """

    id: str
    key: str | None
    workflow_id: str | None
    agent_id: str | None
    status: str | None
    token: int | None
    start: str | None
    end: str | None
    attendees: tuple[str, ...]
    expires_at: str | None
    title: str | None
    description: str | None
    priority: int | None
    committed_at: str | None
    preempted_by: str | None
    raw: dict[str, Any] = field(repr=False, compare=False)
    replayed: bool = False
    idempotency_key: str | None = None
    status_now: str | None = None

    @classmethod
    def parse(cls, doc: Mapping[str, Any], headers: Mapping[str, str] | None = None) -> Hold:
        """The hold in ``doc``; ``headers`` are the answer's (any mapping; case as sent)."""
        heard = {k.lower(): v for k, v in (headers or {}).items()}
        status = _str(doc, "status")
        replayed = heard.get("idempotent-replayed") == "true"
        return cls(
            id=_str(doc, "id") or "",
            key=_str(doc, "key"),
            workflow_id=_str(doc, "workflow_id"),
            agent_id=_str(doc, "agent_id"),
            status=status,
            token=_int(doc, "token"),
            start=_str(doc, "start"),
            end=_str(doc, "end"),
            attendees=_strs(doc.get("attendees")),
            expires_at=_str(doc, "expires_at"),
            title=_str(doc, "title"),
            description=_str(doc, "description"),
            priority=_int(doc, "priority"),
            committed_at=_str(doc, "committed_at"),
            preempted_by=_str(doc, "preempted_by"),
            raw=dict(doc),
            replayed=replayed,
            idempotency_key=heard.get("idempotency-key") or _str(doc, "key"),
            status_now=heard.get("slotward-hold-status", status),
        )


@dataclass(frozen=True)
class Approval:
    """An approval document (docs/approvals.md), with what the answer's headers said.

    ``status`` is ``pending``, ``approved``, ``denied`` or ``expired``;
    ``evidence`` is the JSON value the agent gave, ``action`` what it gates
    (``{"type": "hold.commit", "hold_id": ...}`` for a hold's commit, then
    ``hold_id`` names the hold). ``requested_by`` and ``decided_by`` are agent
    ids; ``note`` is the reviewer's. ``replayed`` is true when a request was
    answered with its stored first answer (``Idempotent-Replayed: true``); then
    ``status_now`` is the approval's status at the time of the replay
    (``Slotward-Approval-Status``), which may differ from ``status``, the status
    in the first answer. Elsewhere ``status_now`` is ``status``.
    """

    id: str
    key: str | None
    workflow_id: str | None
    status: str | None
    summary: str | None
    evidence: Any = field(repr=False)
    action: dict[str, Any] | None
    hold_id: str | None
    requested_by: str | None
    decided_by: str | None
    decided_at: str | None
    note: str | None
    created_at: str | None
    expires_at: str | None
    raw: dict[str, Any] = field(repr=False, compare=False)
    replayed: bool = False
    idempotency_key: str | None = None
    status_now: str | None = None

    @classmethod
    def parse(cls, doc: Mapping[str, Any], headers: Mapping[str, str] | None = None) -> Approval:
        """The approval in ``doc``; ``headers`` are the answer's (any mapping; case as sent)."""
        heard = {k.lower(): v for k, v in (headers or {}).items()}
        status = _str(doc, "status")
        action = doc.get("action")
        return cls(
            id=_str(doc, "id") or "",
            key=_str(doc, "key"),
            workflow_id=_str(doc, "workflow_id"),
            status=status,
            summary=_str(doc, "summary"),
            evidence=doc.get("evidence"),
            action=action if isinstance(action, dict) else None,
            hold_id=_str(doc, "hold_id"),
            requested_by=_str(doc, "requested_by"),
            decided_by=_str(doc, "decided_by"),
            decided_at=_str(doc, "decided_at"),
            note=_str(doc, "note"),
            created_at=_str(doc, "created_at"),
            expires_at=_str(doc, "expires_at"),
            raw=dict(doc),
            replayed=heard.get("idempotent-replayed") == "true",
            idempotency_key=heard.get("idempotency-key") or _str(doc, "key"),
            status_now=heard.get("slotward-approval-status", status),
        )


@dataclass(frozen=True)
class Availability:
    """``find_free_slots``'s answer: busy intervals, free gaps and bookable slots."""

    attendees: tuple[str, ...]
    busy: tuple[Busy, ...]
    free: tuple[Interval, ...]
    slots: tuple[Interval, ...]
    raw: dict[str, Any] = field(repr=False, compare=False)

    @classmethod
    def parse(cls, doc: Mapping[str, Any]) -> Availability:
        return cls(
            attendees=_strs(doc.get("attendees")),
            busy=tuple(Busy.parse(d) for d in _dicts(doc.get("busy"))),
            free=tuple(Interval.parse(d) for d in _dicts(doc.get("free"))),
            slots=tuple(Interval.parse(d) for d in _dicts(doc.get("slots"))),
            raw=dict(doc),
        )


@dataclass(frozen=True)
class ToolAnswer:
    """A tool call's answer document with what its headers said.

    ``replayed`` is None for a read (no idempotency headers); ``idempotency_key``
    is the key the server derived for a write.
    """

    document: dict[str, Any]
    replayed: bool | None = None
    idempotency_key: str | None = None

    @classmethod
    def parse(cls, doc: object, headers: Mapping[str, str]) -> ToolAnswer:
        """The answer ``doc`` with its ``headers`` (any mapping; case as sent)."""
        heard = {k.lower(): v for k, v in headers.items()}
        replayed = heard.get("idempotent-replayed")
        return cls(
            doc if isinstance(doc, dict) else {"result": doc},
            None if replayed is None else replayed == "true",
            heard.get("idempotency-key"),
        )
