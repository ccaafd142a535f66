"""What a history is made of: recorded calls, the store's final state, violations.

The vocabulary of the history checker (:mod:`slotward.testing.history`), kept
apart so recorders (tests, benchmarks) can build histories without the rules.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from slotward.engine.model import AuditEntry, Hold, LedgerRecord

__all__ = ["Call", "Op", "Snapshot", "Violation"]

Op = Literal["create", "commit", "release", "acquire", "complete"]


@dataclass(frozen=True)
class Call:
    """One invocation and its answer, as the client saw it.

    ``target`` is the path parameter: the hold id of a commit or release, the
    key of a completion. ``request`` is the JSON body sent. Times are the
    client's, in seconds since the epoch; ``status`` is None when no answer came.
    ``intent`` is the client's own label for one call as the server identifies
    it: one workflow, the same identity fields, the same ``step`` and the same
    choice of ``Idempotency-Key`` (a retry or a rephrasing keeps the label; a
    new step gets a new one). Per operation, the 2xx answers to a label carry
    one key, and a create label lands on at most one hold. One answer is let
    off: a create's step-drift replay (DESIGN 3), answered with another label's
    live or committed hold of the same intent in that workflow, under that
    hold's key. See :mod:`slotward.testing.history_intents`. None: unlabelled.
    """

    op: Op
    tenant: str
    agent: str
    request: Mapping[str, Any]
    status: int | None
    body: bytes = b""
    headers: Mapping[str, str] = field(default_factory=dict)
    target: str | None = None
    idempotency_key_sent: str | None = None
    invoked_at: float = 0.0
    completed_at: float | None = None
    intent: str | None = None

    @property
    def ok(self) -> bool:
        """The call's effect is acknowledged: a 2xx, but not 202.

        A 202 (a commit waiting for a person's approval) acknowledges nothing of
        the call: nothing is recorded under its key, and the same call answers
        its outcome later (DESIGN 6, "Approvals").
        """
        return self.status is not None and 200 <= self.status < 300 and self.status != 202

    @property
    def may_have_acted(self) -> bool:
        """Answered 2xx, or not answered at all (indeterminate)."""
        return self.status is None or self.ok

    @property
    def fresh(self) -> bool:
        """A 2xx answer that says it did the work (``Idempotent-Replayed: false``)."""
        return self.ok and self.header("Idempotent-Replayed") == "false"

    @property
    def key(self) -> str | None:
        """The key as answered (public form), or a completion's path key."""
        answered = self.header("Idempotency-Key")
        return answered or (self.target if self.op == "complete" else None)

    def header(self, name: str) -> str | None:
        lowered = name.lower()
        return next((v for k, v in self.headers.items() if k.lower() == lowered), None)

    def document(self) -> dict[str, Any]:
        """The body as JSON (an empty dict for an empty or non-object body)."""
        try:
            doc = json.loads(self.body) if self.body else {}
        except ValueError:
            return {}
        return doc if isinstance(doc, dict) else {}


@dataclass(frozen=True)
class Snapshot:
    """The store's final state, as plain engine values."""

    holds: tuple[Hold, ...] = ()
    ledger: tuple[LedgerRecord, ...] = ()
    audit: tuple[AuditEntry, ...] = ()


@dataclass(frozen=True)
class Violation:
    rule: str
    detail: str
    ids: tuple[str, ...] = ()
