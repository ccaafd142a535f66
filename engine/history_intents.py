"""The history checker's intent rule: one intent label, one key, one effect.

The server groups calls by the keys it derives; a fault that derives two keys
for one logical call shows nowhere in a grouping by key. So a client may label
each call with the intent it carries (``Call.intent``), the same label for every
retry and rephrasing of one call, and this rule holds the answers and the store
to the labels.

A label names one call as the server identifies it: one workflow, the same
identity fields, the same ``step`` and the same choice of ``Idempotency-Key``.
A call whose step drifted is answered with a live hold of the same intent
(DESIGN 3), but once that hold is gone the same call books anew: a client
cannot give such a call the label of the call it drifted from.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime

from slotward.engine.executions import stored_key
from slotward.engine.recorded import Call, Snapshot, Violation

__all__ = ["one_key_per_intent"]

RULE = "one_key_per_intent"

_Label = tuple[str, str]  # (tenant, intent)


def one_key_per_intent(calls: Sequence[Call], snapshot: Snapshot, now: datetime) -> list[Violation]:
    """Calls with one label are answered under one key and have at most one effect.

    Per label and operation, every 2xx answer carries the same key (so the
    store holds at most one record for them); a commit, release or completion
    has keys of its own, so a label shared with the create is held apart per
    operation. A create label lands on at most one hold: the holds its answers
    name, and the holds only its unanswered calls can have made. Unlabelled
    calls are not looked at.
    """
    labelled = [c for c in calls if c.intent is not None]
    if not labelled:
        return []
    stored = {(r.tenant, r.key) for r in snapshot.ledger}
    groups: defaultdict[tuple[str, str, str], set[str]] = defaultdict(set)
    for call in labelled:
        if call.ok and call.key:
            groups[call.tenant, str(call.intent), call.op].add(call.key)
    out = []
    for (tenant, intent, op), keys in groups.items():
        if len(keys) > 1:
            kept = sum((tenant, stored_key(k) or "") in stored for k in keys)
            out.append(Violation(RULE, f"{op} calls of intent {intent!r} of {tenant} were answered "
                                 f"under {len(keys)} keys ({kept} of them stored)",
                                 (intent, *sorted(keys))))  # fmt: skip
    for (tenant, intent), holds in _landed(calls, snapshot).items():
        if len(holds) > 1:
            out.append(Violation(RULE, f"intent {intent!r} of {tenant} landed on {len(holds)} "
                                 "holds", (intent, *sorted(holds))))  # fmt: skip
    return out


def _landed(calls: Sequence[Call], snapshot: Snapshot) -> dict[_Label, set[str]]:
    """The holds each create label landed on.

    A hold belongs to a label when its answers name it, or when every call that
    may have created it carries that label: the fresh answers naming it, or
    else (its first answer lost) every unanswered create of its agent in its
    workflow. Where those calls carry different labels, or none, it belongs to
    no label: an unanswered call may or may not have acted.
    """
    landed: defaultdict[_Label, set[str]] = defaultdict(set)
    made_by: defaultdict[tuple[str, str], list[Call]] = defaultdict(list)
    lost: defaultdict[tuple[str, str, str], list[Call]] = defaultdict(list)
    for call in calls:
        if call.op != "create":
            continue
        hold_id = call.document().get("id") if call.ok else None
        if isinstance(hold_id, str):
            if call.intent is not None:
                landed[call.tenant, call.intent].add(hold_id)
            if call.fresh:
                made_by[call.tenant, hold_id].append(call)
        elif call.status is None:
            lost[call.tenant, call.agent, str(call.request.get("workflow_id"))].append(call)
    for hold in snapshot.holds:
        makers = made_by.get((hold.tenant, hold.id)) or lost.get(
            (hold.tenant, hold.agent_id, hold.workflow_id), []
        )
        intents = {c.intent for c in makers}
        if len(intents) == 1 and None not in intents:
            landed[hold.tenant, str(intents.pop())].add(hold.id)
    return landed
