"""Which intent label made each hold: for the history checker's intent rule.

A hold is made by one create call. When that call's answer arrived (fresh,
``Idempotent-Replayed: false``), the answer names the hold and the call's label
is known. When it was lost, the hold's maker is inferred from the unanswered
creates that could have made it: of its tenant, agent and workflow, asking for
its very interval (normalized as the engine normalizes), and sent with the step
and ``Idempotency-Key`` that give the hold's key. If all of them carry one
label, that label made the hold; otherwise no label is blamed for it, since an
unanswered call may or may not have acted.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from slotward.engine.errors import SlotwardError
from slotward.engine.model import Hold
from slotward.engine.rules.fingerprint import (
    check_step,
    derive_key,
    hold_intent,
    ledger_key,
    public_key,
)
from slotward.engine.rules.timenorm import Interval, normalize_interval
from slotward.engine.usecases.placing import TOOL
from slotward.testing.recorded import Call, Snapshot

__all__ = ["Label", "Made", "made_by_label", "requested_interval"]

Label = tuple[str, str]  # (tenant, intent)


@dataclass(frozen=True)
class Made:
    """A hold a label made, and how that is known."""

    hold_id: str
    key: str | None  # the public key it was made under; None if not stored
    call: int | None  # the index of its fresh answer; None when inferred

    def how(self) -> str:
        if self.call is None:
            return "inferred: its creating answer was lost"
        return f"fresh in call {self.call}"


def made_by_label(calls: Sequence[Call], snapshot: Snapshot) -> dict[Label, dict[str, Made]]:
    """Per create label, the holds it made (by hold id), fresh or inferred."""
    made: defaultdict[Label, dict[str, Made]] = defaultdict(dict)
    fresh: set[tuple[str, str]] = set()
    for i, call in enumerate(calls):
        hold_id = call.document().get("id") if call.op == "create" and call.fresh else None
        if isinstance(hold_id, str):
            fresh.add((call.tenant, hold_id))
            if call.intent is not None:
                made[call.tenant, call.intent].setdefault(hold_id, Made(hold_id, call.key, i))
    unanswered = [c for c in calls if c.op == "create" and c.status is None]
    for hold in snapshot.holds:
        if (hold.tenant, hold.id) in fresh:
            continue
        labels = {c.intent for c in unanswered if _could_have_made(c, hold)}
        if len(labels) == 1 and None not in labels:
            label = (hold.tenant, str(labels.pop()))
            made[label].setdefault(hold.id, Made(hold.id, public_key(hold.key), None))
    return dict(made)


def _could_have_made(call: Call, hold: Hold) -> bool:
    request = call.request
    if (call.tenant, call.agent, request.get("workflow_id")) != (
        hold.tenant,
        hold.agent_id,
        hold.workflow_id,
    ):
        return False
    if requested_interval(request) != (hold.start, hold.end):
        return False
    try:
        step = check_step(request.get("step"))
    except SlotwardError:
        return False  # refused before it could act
    # The hold's own identity fields, under the call's workflow and step: the
    # key the call would have made it under (attendees need the directory to
    # normalize, so the hold's are taken as the call's).
    intent = hold_intent(hold.attendees, Interval(hold.start, hold.end))
    derived = derive_key(
        tenant=hold.tenant, workflow=hold.workflow_id, tool=TOOL, intent=intent, step=step
    )
    return ledger_key(call.idempotency_key_sent, derived) == hold.key


def requested_interval(request: Mapping[str, Any]) -> tuple[datetime, datetime] | None:
    """The normalized ``[start, end)`` a create asked for (a ``/v1/holds`` body or a
    ``/v1/tool-calls`` envelope), or None when the engine would have refused it."""
    args = request.get("arguments")
    fields: Mapping[str, Any] = args if isinstance(args, Mapping) else request
    try:
        interval = normalize_interval(
            start=fields.get("start", fields.get("start_time")),
            end=fields.get("end", fields.get("end_time")),
            duration_minutes=fields.get("duration_minutes"),
            duration=fields.get("duration"),
            timezone=fields.get("timezone"),
        )
    except SlotwardError:
        return None
    return interval.start, interval.end
