"""The history checker's intent rule: one intent label, one key, one effect.

The server groups calls by the keys it derives; a fault that derives two keys
for one logical call shows nowhere in a grouping by key. So a client may label
each call with the intent it carries (``Call.intent``), the same label for every
retry and rephrasing of one call, and this rule holds the answers and the store
to the labels.

A label names one call as the server identifies it: one workflow, the same
identity fields, the same ``step`` and the same choice of ``Idempotency-Key``.
Calls that differ only in ``step`` carry different labels, and DESIGN 3 lets
them meet: while one's hold is live or committed, the other is answered with
that hold as a replay under the hold's key (a *step-drift replay*; the drifted
key is not recorded), and once the hold is gone it books anew under its own
key. Such a replay is the one answer of a label that may carry another key.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from slotward.engine.model import Hold
from slotward.engine.rules.fingerprint import public_key
from slotward.engine.rules.timenorm import format_instant
from slotward.engine.usecases.executions import stored_key
from slotward.testing.history_makers import Label, Made, made_by_label
from slotward.testing.recorded import Call, Snapshot, Violation

__all__ = ["one_key_per_intent"]

RULE = "one_key_per_intent"

# What an answer about a hold says when the hold is gone for good: a released or
# preempted hold never becomes live again (an expired one may, by a late commit).
_GONE_STATUSES = frozenset({"released", "preempted"})
_GONE_CODES = frozenset({"hold_released", "hold_preempted"})


@dataclass(frozen=True)
class _Answer:
    """A labelled 2xx answer: its call, its index, and the hold it is about."""

    index: int
    call: Call
    hold_id: str | None

    def describe(self) -> str:
        how = "fresh" if self.call.fresh else "replayed"
        return f"{self.hold_id} ({how}, first in call {self.index} {_when(self.call)})"


def one_key_per_intent(calls: Sequence[Call], snapshot: Snapshot, now: datetime) -> list[Violation]:
    """Calls with one label are answered under one key and have at most one effect.

    Per label and operation, every 2xx answer carries the same key (so the
    store holds at most one record for them); a commit, release or completion
    has keys of its own, so a label shared with the create is held apart per
    operation. A create label lands on at most one hold: the holds it made
    (named by its fresh answers, or inferred, see ``history_makers``) and the
    holds its other answers name.

    Exempt from both is a create's step-drift replay: a replayed answer under
    a key that is not one the label made a hold under, naming a stored hold
    whose key that is, in the call's workflow, with the intent fingerprint of
    every hold the label made (or, if it made none, of every other such
    replay). A drift replay that came after an answer had shown its hold
    released or preempted is reported: only a live or committed hold answers
    one. Unlabelled calls are not looked at.
    """
    if all(c.intent is None for c in calls):
        return []
    answers = _answers(calls)
    holds = {(h.tenant, h.id): h for h in snapshot.holds}
    made = made_by_label(calls, snapshot)
    stored = {(r.tenant, r.key) for r in snapshot.ledger}
    out: list[Violation] = []
    landed: defaultdict[Label, dict[str, str]] = defaultdict(dict)
    for label, found in made.items():
        landed[label] |= {m.hold_id: m.how() for m in found.values()}
    for (tenant, intent, op), group in answers.items():
        label = (tenant, intent)
        own = made.get(label, {})
        drift = _drift_replays(tenant, group, own, holds) if op == "create" else []
        counted = [a for a in group if a not in drift]
        out += _many_keys(tenant, intent, op, counted, own, stored)
        if own:  # without a hold of its own, a label is not sure to be drifting
            out += _replayed_when_gone(tenant, intent, drift, calls)
        if op == "create":
            for a in counted:
                if a.hold_id is not None:
                    landed[label].setdefault(a.hold_id, f"replayed in call {a.index}")
    for (tenant, intent), on in landed.items():
        if len(on) > 1:
            said = ", ".join(f"{h} ({how})" for h, how in sorted(on.items()))
            out.append(Violation(RULE, f"intent {intent!r} of {tenant} landed on {len(on)} "
                                 f"holds: {said}", (intent, *sorted(on))))  # fmt: skip
    return out


def _answers(calls: Sequence[Call]) -> dict[tuple[str, str, str], list[_Answer]]:
    """The labelled 2xx answers with a key, per (tenant, label, operation), in call order."""
    out: defaultdict[tuple[str, str, str], list[_Answer]] = defaultdict(list)
    for i, call in enumerate(calls):
        if call.intent is None or not call.ok or not call.key:
            continue
        named = call.document().get("id") if call.op == "create" else call.target
        hold_id = named if isinstance(named, str) else None
        out[call.tenant, call.intent, call.op].append(_Answer(i, call, hold_id))
    return dict(out)


def _drift_replays(
    tenant: str,
    group: Sequence[_Answer],
    made: Mapping[str, Made],
    holds: Mapping[tuple[str, str], Hold],
) -> list[_Answer]:
    """The answers of one create label that are step-drift replays (see the rule)."""
    own = {m.key for m in made.values()}
    candidates: list[tuple[_Answer, Hold]] = []
    for a in group:
        hold = holds.get((tenant, a.hold_id or ""))
        if (
            hold is not None
            and not a.call.fresh
            and a.call.key not in own
            and public_key(hold.key) == a.call.key
            and a.call.request.get("workflow_id") == hold.workflow_id
        ):
            candidates.append((a, hold))
    mine = [h for m in made.values() if (h := holds.get((tenant, m.hold_id))) is not None]
    intents = {h.intent_fp for h in mine or [h for _, h in candidates]}
    if len(intents) != 1:
        return []  # no one intent to drift on: every answer counts
    return [a for a, h in candidates if h.intent_fp in intents]


def _many_keys(
    tenant: str,
    intent: str,
    op: str,
    counted: Sequence[_Answer],
    made: Mapping[str, Made],
    stored: set[tuple[str, str]],
) -> list[Violation]:
    first: dict[str, _Answer] = {}
    for a in counted:
        first.setdefault(str(a.call.key), a)
    if len(first) < 2:
        return []
    kept = sum((tenant, stored_key(k) or "") in stored for k in first)
    said = "; ".join(
        f"{key} answered {a.describe()}{_inferred(a, made)}" for key, a in sorted(first.items())
    )
    return [Violation(RULE, f"{op} calls of intent {intent!r} of {tenant} were answered under "
                      f"{len(first)} keys ({kept} of them stored): {said}",
                      (intent, *sorted(first)))]  # fmt: skip


def _inferred(answer: _Answer, made: Mapping[str, Made]) -> str:
    m = made.get(answer.hold_id or "")
    return f" ({m.how()})" if m is not None and m.call is None else ""


def _replayed_when_gone(
    tenant: str, intent: str, drift: Sequence[_Answer], calls: Sequence[Call]
) -> list[Violation]:
    """Drift replays invoked after some answer had shown their hold released or preempted.

    Called only for a label that made a hold of its own, so is sure to be
    drifting: without one, a replay under the hold's key may be the label's own
    late duplicate, which gets its first answer whatever became of the hold
    (DESIGN 3).
    """
    out = []
    for a in drift:
        gone = _shown_gone(a, calls)
        if gone is not None:
            j, status = gone
            out.append(Violation(RULE, f"create call {a.index} of intent {intent!r} of {tenant} "
                                 f"was answered with {a.hold_id} as a step-drift replay under "
                                 f"{a.call.key}, after call {j} had shown it {status}",
                                 (intent, str(a.hold_id))))  # fmt: skip
    return out


def _shown_gone(answer: _Answer, calls: Sequence[Call]) -> tuple[int, str] | None:
    for j, call in enumerate(calls):
        if (
            call.tenant != answer.call.tenant
            or call.completed_at is None
            or call.completed_at >= answer.call.invoked_at
        ):
            continue
        if call.op not in ("commit", "release") or call.target != answer.hold_id:
            continue
        doc = call.document()
        said = doc.get("status") if call.ok else doc.get("code")
        if said in _GONE_STATUSES or said in _GONE_CODES:
            return j, str(said)
    return None


def _when(call: Call) -> str:
    at = call.completed_at if call.completed_at is not None else call.invoked_at
    return "at " + format_instant(datetime.fromtimestamp(at, UTC))  # the client's clock
