"""A history checker: what clients were told, held against what the store kept.

Tests and benchmarks record every call they make (:class:`Call`: the request,
the answer with its headers and body, and the client's times) and then read the
store once (:class:`Snapshot`). :func:`check` returns every broken promise of
DESIGN sections 3-5 as a :class:`Violation`; an empty list means the history is
consistent. Each rule is also a function of its own, so a test can aim at one;
the intent rule, the overlap rule and the token rule live in
``history_intents``, ``history_overlap`` and ``history_tokens``, and every rule
is exported from here.

A call without an answer (a timeout, a connection a killed server reset) has
``status=None``: it is *indeterminate*, it may or may not have taken effect. No
rule ever blames such a call; it only excuses effects it might explain. The
history is taken to be complete (every call made to the service) and shorter
than the ledger's retention time (purged records would read as lost writes).
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TypeVar

from slotward.engine.model import Hold, HoldStatus, LedgerRecord
from slotward.engine.usecases.executions import stored_key
from slotward.testing.history_intents import one_key_per_intent
from slotward.testing.history_overlap import no_overlap
from slotward.testing.history_tokens import commits_with_current_token
from slotward.testing.recorded import Call, Op, Snapshot, Violation

__all__ = [
    "RULES",
    "Call",
    "Op",
    "Snapshot",
    "Violation",
    "acknowledged_writes_present",
    "check",
    "commits_with_current_token",
    "no_overlap",
    "one_effect_per_key",
    "one_key_per_intent",
    "preemption_by_higher_priority",
    "replays_identical",
]

_T = TypeVar("_T")
_K = TypeVar("_K")

Rule = Callable[[Sequence[Call], Snapshot, datetime], list[Violation]]


def check(calls: Sequence[Call], snapshot: Snapshot, now: datetime) -> list[Violation]:
    """Every rule's violations; ``now`` is the instant the snapshot was read."""
    return [v for rule in RULES for v in rule(calls, snapshot, now)]


def one_effect_per_key(calls: Sequence[Call], snapshot: Snapshot, now: datetime) -> list[Violation]:
    """One hold per key and per live intent; one fresh answer per key; one lease at a time."""
    rule = "one_effect_per_key"
    out: list[Violation] = []
    for (tenant, key), group in _by_key(c for c in calls if c.op == "create" and c.ok).items():
        named = sorted({str(c.document().get("id")) for c in group})
        if len(named) > 1:
            out.append(Violation(rule, f"key {key} of {tenant} answered {len(named)} holds",
                                 (key, *named)))  # fmt: skip
    counted = (
        c for c in calls
        if c.op != "acquire" and c.document().get("state") != "failed_retryable"
    )  # fmt: skip
    for (tenant, key), group in _by_key(counted).items():
        if sum(c.fresh for c in group) > 1:
            out.append(Violation(rule, f"key {key} of {tenant} did its work twice", (key,)))
    for (tenant, key), group in _by_key(c for c in calls if c.op == "acquire").items():
        out += _overlapping_leases(rule, tenant, key, group, calls)
    for (tenant, key), holds in _group(snapshot.holds, lambda h: (h.tenant, h.key)).items():
        if len(holds) > 1:
            out.append(Violation(rule, f"{len(holds)} holds stored under key {key} of {tenant}",
                                 (key, *(h.id for h in holds))))  # fmt: skip
    live = [h for h in snapshot.holds if h.blocks_at(now)]
    for (_, wf, _), holds in _group(live, lambda h: (h.tenant, h.workflow_id, h.intent_fp)).items():
        if len(holds) > 1:
            ids = tuple(h.id for h in holds)
            out.append(Violation(rule, f"workflow {wf} holds one intent {len(holds)} times", ids))
    return out


def _overlapping_leases(
    rule: str, tenant: str, key: str, group: list[Call], calls: Sequence[Call]
) -> list[Violation]:
    """Two granted leases of one key must follow each other: a takeover after expiry,
    or a new acquire after a ``failed_retryable`` completion freed the key.

    Ordered by the server's own times (the answered expiry less the lease asked
    for), so the client's clock and the answers' arrival order do not matter.
    """
    granted = sorted((c for c in group if c.status == 201), key=lambda c: _lease(c)[0])
    out = []
    for prev, nxt in itertools.pairwise(granted):
        (_, prev_end, prev_token), (start, _, token) = _lease(prev), _lease(nxt)
        freed = any(
            c.op == "complete" and c.tenant == tenant
            and c.request.get("lease_token") == prev_token
            and c.request.get("outcome") == "failed_retryable"
            and c.may_have_acted and c.invoked_at <= (nxt.completed_at or 0.0)
            for c in calls
        )  # fmt: skip
        if start < prev_end and not freed:
            out.append(Violation(rule, f"key {key} of {tenant} granted a lease while "
                                 f"{prev_token} still ran", (key, prev_token, token)))  # fmt: skip
    return out


def _lease(call: Call) -> tuple[datetime, datetime, str]:
    doc = call.document()
    end = datetime.fromisoformat(str(doc.get("lease_expires_at")))
    seconds = int(call.request.get("lease_seconds", 30))
    return end - timedelta(seconds=seconds), end, str(doc.get("lease_token"))


def preemption_by_higher_priority(
    calls: Sequence[Call], snapshot: Snapshot, now: datetime
) -> list[Violation]:
    """Every preempted hold names an existing hold of strictly higher priority."""
    out = []
    by_id = {(h.tenant, h.id): h for h in snapshot.holds}
    for loser in snapshot.holds:
        if loser.status is not HoldStatus.PREEMPTED:
            continue
        winner = by_id.get((loser.tenant, loser.preempted_by or ""))
        if winner is None or winner.priority <= loser.priority:
            found = "missing" if winner is None else f"priority {winner.priority}"
            detail = f"{loser.id} (priority {loser.priority}) preempted by {loser.preempted_by}"
            out.append(Violation("preemption_by_higher_priority", f"{detail} ({found})",
                                 (loser.id, loser.preempted_by or "")))  # fmt: skip
    return out


def acknowledged_writes_present(
    calls: Sequence[Call], snapshot: Snapshot, now: datetime
) -> list[Violation]:
    """Every write a 2xx acknowledged is in the snapshot (or was undone by a later call)."""
    seen = _Seen(
        {(h.tenant, h.id): h for h in snapshot.holds},
        {(r.tenant, r.key): r for r in snapshot.ledger},
        {(e.tenant, e.hold_id, e.action) for e in snapshot.audit},
        calls,
        now,
    )
    out: dict[Violation, None] = {}  # once, however many answers acknowledged it
    for call in calls:
        problem = _MISSING[call.op](call, seen) if call.ok else None
        if problem is not None:
            ids = tuple(str(i) for i in (call.key, call.target or call.document().get("id")) if i)
            out[Violation("acknowledged_writes_present", problem, ids)] = None
    return list(out)


@dataclass(frozen=True)
class _Seen:
    holds: Mapping[tuple[str, str], Hold]
    ledger: Mapping[tuple[str, str], LedgerRecord]
    audited: set[tuple[str, str | None, str]]
    calls: Sequence[Call]
    now: datetime

    def record(self, call: Call) -> LedgerRecord | None:
        return self.ledger.get((call.tenant, stored_key(call.key or "") or ""))


def _created(call: Call, seen: _Seen) -> str | None:
    hold_id, record = str(call.document().get("id")), seen.record(call)
    if (call.tenant, hold_id) not in seen.holds:
        return f"created hold {hold_id} is missing"
    # Replays too: a crash may have cut the first answer off, and then the
    # replay is the only acknowledgement the client ever got.
    if record is None or record.hold_id != hold_id or record.body != call.body:
        return f"the record of key {call.key} does not hold {hold_id}'s answer"
    if (call.tenant, hold_id, "hold.create") not in seen.audited:
        return f"the creation of {hold_id} is not audited"
    return None


def _moved(call: Call, seen: _Seen) -> str | None:
    hold = seen.holds.get((call.tenant, str(call.target)))
    if hold is None:  # replays included: the first answer may have been lost
        return f"{call.op} target {call.target} is missing"
    said, reads = call.document().get("status"), hold.status_at(seen.now).value
    if call.op == "release" and said != reads:
        return f"{hold.id} answered {said} to a release, reads {reads}"
    if call.op == "commit" and not _still_committed(hold, seen.calls):
        return f"committed {hold.id} reads {reads}"
    # A release that found the hold released already answers so too: some
    # release was logged either way. One that found it preempted logs nothing.
    if (
        said in ("committed", "released")
        and (hold.tenant, hold.id, _LOGS[said]) not in seen.audited
    ):
        return f"the {call.op} of {hold.id} is not audited"
    return None


_LOGS = {"committed": "hold.commit", "released": "hold.release"}


def _leased(call: Call, seen: _Seen) -> str | None:
    if call.status != 201 or seen.record(call) is not None or _freed(call, seen.calls):
        return None
    return f"the lease on key {call.key} has no record"


def _completed(call: Call, seen: _Seen) -> str | None:
    state, record = call.document().get("state"), seen.record(call)
    if state not in ("succeeded", "failed_terminal"):
        return None
    if record is None or record.state != state or record.body != call.body:
        return f"the completion of key {call.key} is not stored as answered"
    return None


_MISSING: Mapping[str, Callable[[Call, _Seen], str | None]] = {
    "create": _created,
    "commit": _moved,
    "release": _moved,
    "acquire": _leased,
    "complete": _completed,
}


def _still_committed(hold: Hold, calls: Sequence[Call]) -> bool:
    if hold.status is HoldStatus.COMMITTED:
        return True
    released = any(
        c.op == "release" and c.target == hold.id and c.tenant == hold.tenant
        and c.may_have_acted for c in calls
    )  # fmt: skip
    return hold.status is HoldStatus.RELEASED and hold.committed_at is not None and released


def _freed(call: Call, calls: Sequence[Call]) -> bool:
    """Whether a retryable failure (answered or not) may have deleted the key's record."""
    return any(
        c.op == "complete" and c.tenant == call.tenant and c.key == call.key
        and c.request.get("outcome") == "failed_retryable" and c.may_have_acted
        for c in calls
    )  # fmt: skip


def replays_identical(calls: Sequence[Call], snapshot: Snapshot, now: datetime) -> list[Violation]:
    """Per key, every 2xx answer repeats the first one's status and body byte for byte.

    Granted leases (201 acquires) differ per takeover and a retryable failure
    frees its key, so of ``/v1/executions`` only completions and their replays count.
    """
    answers = (
        c for c in calls
        if c.ok and not (c.op == "acquire" and c.status == 201)
        and c.document().get("state") != "failed_retryable"
    )  # fmt: skip
    out = []
    for (tenant, key), group in _by_key(answers).items():
        group.sort(key=lambda c: c.completed_at or c.invoked_at)
        first = group[0]
        for call in group[1:]:
            if (call.status, call.body) != (first.status, first.body):
                out.append(Violation("replays_identical", f"key {key} of {tenant} answered "
                                     f"{call.status} {call.body!r}, first {first.status} "
                                     f"{first.body!r}", (key,)))  # fmt: skip
    return out


def _by_key(calls: Iterable[Call]) -> dict[tuple[str, str], list[Call]]:
    return _group((c for c in calls if c.key), lambda c: (c.tenant, c.key or ""))


def _group(items: Iterable[_T], by: Callable[[_T], _K]) -> dict[_K, list[_T]]:
    groups: dict[_K, list[_T]] = defaultdict(list)
    for item in items:
        groups[by(item)].append(item)
    return dict(groups)


RULES: tuple[Rule, ...] = (
    one_effect_per_key, one_key_per_intent, no_overlap, preemption_by_higher_priority,
    commits_with_current_token, acknowledged_writes_present, replays_identical,
)  # fmt: skip
