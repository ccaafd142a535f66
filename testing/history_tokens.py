"""The history checker's token rule: a commit succeeds only with the hold's current token.

Two sources tell what a hold's fencing token was. The answers clients got
(every answer about a hold carries its token) show the moves somebody was told
of. The store's audit log, read in chain order, shows every move: each
``hold.preempt``, ``hold.commit`` and ``hold.release`` of a hold bumps its
token by one, a ``hold.expire`` keeps it (DESIGN 5). So the log also shows a
preemption whose only witness, the winner's answer, was lost. Like the
snapshot, the log is taken whole: a hold's entries start with its
``hold.create``, written in the transaction that stored the hold.

The order of those entries is checked against a table written out here, not
taken from :mod:`slotward.engine.rules.holds`, so a wrong transition table cannot
vouch for itself.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from slotward.engine.model import HoldStatus
from slotward.engine.rules.timenorm import format_instant
from slotward.testing.recorded import Call, Snapshot, Violation

__all__ = ["commits_with_current_token"]

RULE = "commits_with_current_token"

# The status an audited transition leaves a hold in, and which may come next.
_LEAVES: Mapping[str, HoldStatus] = {
    "hold.preempt": HoldStatus.PREEMPTED,
    "hold.commit": HoldStatus.COMMITTED,
    "hold.release": HoldStatus.RELEASED,
    "hold.expire": HoldStatus.EXPIRED,
}
_MAY_FOLLOW: Mapping[HoldStatus, frozenset[str]] = {
    HoldStatus.HELD: frozenset(_LEAVES),
    HoldStatus.EXPIRED: frozenset({"hold.commit", "hold.release"}),  # a late commit, if free
    HoldStatus.COMMITTED: frozenset({"hold.release"}),
    HoldStatus.PREEMPTED: frozenset(),  # releasing it changes nothing, so nothing is logged
    HoldStatus.RELEASED: frozenset(),
}


@dataclass
class _Story:
    """One hold as its audit entries tell it, from ``hold.create`` on."""

    created_seq: int
    status: HoldStatus = HoldStatus.HELD
    token: int = 1
    last_seq: int = 0  # the entry that last moved it
    committed_with: int | None = None  # the token at its (first) audited commit
    committed_after: int = 0  # the seq of the move before that commit


def commits_with_current_token(
    calls: Sequence[Call], snapshot: Snapshot, now: datetime
) -> list[Violation]:
    """A commit succeeds only with the token the hold has at that moment.

    From the answers: a fresh commit moves the token on by one, no commit
    succeeds with a token an earlier answer had moved past, and every committed
    hold had its commit. From the audit log: every stored hold has its
    ``hold.create`` entry and every such entry its stored hold (the snapshot
    and the log both hold the whole run); no hold is moved before its
    ``hold.create``; its entries follow the state machine (no commit after a
    preemption or a release); no ``hold.expire`` comes before the hold's
    ``expires_at``; a fresh commit was sent the token the log gives the hold at
    its commit; and every stored hold has the token and status its log leaves
    it with.
    """
    stories, out = _stories(snapshot)
    out += _unlogged(stories, snapshot)
    out += _answered_commits(calls, snapshot)
    out += _outdated_tokens(calls)
    for call in calls:
        sent = call.request.get("token")
        story = stories.get((call.tenant, str(call.target)))
        if call.op != "commit" or not call.fresh or story is None:
            continue
        if story.committed_with is not None and story.committed_with != sent:
            out.append(Violation(RULE, f"commit of {call.target} with token {sent} succeeded, "
                                 f"but the audit log had moved it to token "
                                 f"{story.committed_with} (seq {story.committed_after})",
                                 (str(call.target),)))  # fmt: skip
    for hold in snapshot.holds:
        story = stories.get((hold.tenant, hold.id))
        if story is not None and (hold.status, hold.token) != (story.status, story.token):
            out.append(Violation(RULE, f"{hold.id} is stored {hold.status.value} with token "
                                 f"{hold.token}, its audit log leaves it {story.status.value} "
                                 f"with token {story.token}", (hold.id,)))  # fmt: skip
    return out


def _stories(snapshot: Snapshot) -> tuple[dict[tuple[str, str], _Story], list[Violation]]:
    """Every created hold's story, and the entries that break the state machine."""
    stories: dict[tuple[str, str], _Story] = {}
    expiring = {(h.tenant, h.id): h.expires_at for h in snapshot.holds}
    out = []
    for entry in sorted(snapshot.audit, key=lambda e: (e.tenant, e.seq)):
        if entry.hold_id is None:
            continue
        at = (entry.tenant, entry.hold_id)
        if entry.action == "hold.create":
            stories.setdefault(at, _Story(entry.seq, last_seq=entry.seq))
            continue
        story, leaves = stories.get(at), _LEAVES.get(entry.action)
        if leaves is None:
            continue
        where = f"audit seq {entry.seq} of {entry.tenant}: {entry.action} of {entry.hold_id}"
        if story is None:
            out.append(Violation(RULE, f"{where}, never created", (entry.hold_id,)))
            continue
        if entry.action not in _MAY_FOLLOW[story.status]:
            out.append(Violation(RULE, f"{where}, {story.status.value} since seq "
                                 f"{story.last_seq}", (entry.hold_id,)))  # fmt: skip
        due = expiring.get(at)
        if entry.action == "hold.expire" and due is not None and entry.at < due:
            out.append(Violation(RULE, f"{where} at {format_instant(entry.at)}, before "
                                 f"its expires_at {format_instant(due)}",
                                 (entry.hold_id,)))  # fmt: skip
        if entry.action == "hold.commit" and story.committed_with is None:
            story.committed_with, story.committed_after = story.token, story.last_seq
        story.token += 0 if leaves is HoldStatus.EXPIRED else 1
        story.status, story.last_seq = leaves, entry.seq
    return stories, out


def _unlogged(stories: Mapping[tuple[str, str], _Story], snapshot: Snapshot) -> list[Violation]:
    """Stored holds without a ``hold.create`` entry, and such entries without their hold.

    The engine writes a hold and its entry in one transaction, and a snapshot
    holds every hold and the whole log, so either one alone is a lost write.
    """
    stored = {(h.tenant, h.id) for h in snapshot.holds}
    out = [
        Violation(RULE, f"{hold_id} of {tenant} is stored, but the audit log never created it",
                  (hold_id,))
        for tenant, hold_id in sorted(stored - stories.keys())
    ]  # fmt: skip
    for tenant, hold_id in sorted(stories.keys() - stored):
        seq = stories[tenant, hold_id].created_seq
        out.append(Violation(RULE, f"audit seq {seq} of {tenant} created {hold_id}, which is "
                             "not stored", (hold_id,)))  # fmt: skip
    return out


def _answered_commits(calls: Sequence[Call], snapshot: Snapshot) -> list[Violation]:
    """A fresh commit moves the token on by one; every committed hold had its commit."""
    out = []
    fresh: dict[tuple[str, str | None], dict[str, Any]] = {}
    for call in calls:
        if call.op != "commit" or not call.fresh:
            continue
        doc, sent = call.document(), call.request.get("token")
        fresh[call.tenant, call.target] = doc
        moved_on = isinstance(sent, int) and doc.get("token") == sent + 1
        if doc.get("status") != "committed" or not moved_on:
            out.append(Violation(RULE, f"commit of {call.target} with token {sent} answered "
                                 f"{doc.get('status')} token {doc.get('token')}",
                                 (str(call.target),)))  # fmt: skip
    unanswered = {(c.tenant, c.target) for c in calls if c.op == "commit" and c.status is None}
    for hold in snapshot.holds:
        if hold.committed_at is None:
            continue
        answered = fresh.get((hold.tenant, hold.id))
        if answered is None and (hold.tenant, hold.id) not in unanswered:
            out.append(Violation(RULE, f"{hold.id} is committed but no commit said so",
                                 (hold.id,)))  # fmt: skip
        elif answered and hold.status is HoldStatus.COMMITTED and answered["token"] != hold.token:
            out.append(Violation(RULE, f"{hold.id} has token {hold.token}, its commit answered "
                                 f"{answered.get('token')}", (hold.id,)))  # fmt: skip
    return out


def _outdated_tokens(calls: Sequence[Call]) -> list[Violation]:
    """A commit that succeeded with a token some earlier answer had already moved past.

    Every answer about a hold carries its token; a commit that was sent token
    ``t`` after an answer showed the hold at a later token (released, or
    committed before) must have been refused.
    """
    shown: defaultdict[tuple[str, str], list[tuple[float, int]]] = defaultdict(list)
    for call in calls:
        doc = call.document()
        hold_id = call.target if call.op in ("commit", "release") else doc.get("id")
        if call.ok and call.op in ("create", "commit", "release") and hold_id is not None:
            token = doc.get("token")
            if isinstance(token, int) and call.completed_at is not None:
                shown[call.tenant, str(hold_id)].append((call.completed_at, token))
    out = []
    for call in calls:
        sent = call.request.get("token")
        if call.op != "commit" or not call.fresh or not isinstance(sent, int):
            continue
        earlier = [t for at, t in shown[call.tenant, str(call.target)] if at < call.invoked_at]
        if earlier and max(earlier) > sent:
            out.append(Violation(RULE, f"commit of {call.target} with token {sent} succeeded after"
                                 f" an answer showed token {max(earlier)}",
                                 (str(call.target),)))  # fmt: skip
    return out
