"""The history checker's overlap rule: no attendee is ever booked twice at once.

A double booking need not last until the store is read: two holds whose slots
overlap may both have blocked for a while, both agents told of theirs, before
one was released, preempted or expired. So the rule replays each tenant's audit
log in chain order and tells, for every stored hold, when it blocked its slot,
as the engine decides it (``Hold.blocks_at``, the conflict check of a claim or
a late commit):

- a held hold blocks from its ``hold.create`` until its first ``hold.release``,
  ``hold.preempt``, ``hold.expire`` or ``hold.commit``, and never at or past
  its ``expires_at``;
- a committed hold blocks from its ``hold.commit`` until its ``hold.release``.
  A commit after ``expires_at`` (a late commit, allowed while the slot is free)
  starts blocking anew at the commit.

Blocking periods are half-open and ordered by the log: an entry ends a period
before the next entry starts one, even at the same instant, so a preemption
(the losers' ``hold.preempt`` entries, then the winner's ``hold.create``, in one
transaction) is no overlap, while a hold created before another stops blocking
is one, however close the clocks. Only a moment at which some period starts can
be the first of an overlap, so each period is held against the periods open
when it starts; there, as in the engine, a held hold past its ``expires_at``
blocks nobody. Holds without a ``hold.create`` entry are left to the token rule.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from slotward.engine.model import AuditEntry, Hold
from slotward.engine.rules.timenorm import format_instant
from slotward.testing.recorded import Call, Snapshot, Violation

__all__ = ["no_overlap"]

RULE = "no_overlap"

_ENDS = frozenset({"hold.release", "hold.preempt", "hold.expire"})


@dataclass(frozen=True)
class _Period:
    """A stretch during which ``hold`` blocks; open until an audit entry ends it."""

    hold: Hold
    deadline: datetime | None  # a held hold's expires_at; None once committed

    def blocks_at(self, at: datetime) -> bool:
        return self.deadline is None or at < self.deadline


def no_overlap(calls: Sequence[Call], snapshot: Snapshot, now: datetime) -> list[Violation]:
    """No two holds of one attendee with overlapping slots ever block at once.

    Held against the audit log (see the module): for each hold that starts
    blocking (its ``hold.create``, or a ``hold.commit``), every other hold of a
    shared attendee whose slot overlaps and which blocks at that entry is
    reported, with the instant and audit seq at which both blocked. The stored
    state is held too: holds that block at ``now`` as stored must not overlap
    either (this covers holds the log does not explain). Each pair is reported
    once per attendee.
    """
    found: dict[tuple[str, str, frozenset[str]], Violation] = {}
    stored = {(h.tenant, h.id): h for h in snapshot.holds}
    for tenant, entries in _chains(snapshot.audit).items():
        for attendee, first, second, entry in _replayed(tenant, entries, stored):
            said = (f"{attendee}: {_slot(first)} and {_slot(second)} overlap, both blocking at "
                    f"{format_instant(entry.at)} (audit seq {entry.seq}: {entry.action} of "
                    f"{second.id})")  # fmt: skip
            found.setdefault((tenant, attendee, frozenset((first.id, second.id))),
                             Violation(RULE, said, (attendee, first.id, second.id)))  # fmt: skip
    for attendee, first, second in _stored_overlaps(snapshot.holds, now):
        said = (f"{attendee}: {_slot(first)} and {_slot(second)} overlap, both blocking at "
                f"{format_instant(now)} as stored")  # fmt: skip
        found.setdefault((first.tenant, attendee, frozenset((first.id, second.id))),
                         Violation(RULE, said, (attendee, first.id, second.id)))  # fmt: skip
    return list(found.values())


def _chains(audit: Iterable[AuditEntry]) -> dict[str, list[AuditEntry]]:
    chains: defaultdict[str, list[AuditEntry]] = defaultdict(list)
    for entry in sorted(audit, key=lambda e: (e.tenant, e.seq)):
        if entry.hold_id is not None:
            chains[entry.tenant].append(entry)
    return dict(chains)


def _replayed(
    tenant: str, entries: Sequence[AuditEntry], stored: dict[tuple[str, str], Hold]
) -> Iterable[tuple[str, Hold, Hold, AuditEntry]]:
    """(attendee, blocking hold, hold starting to block, the entry) for each overlap."""
    created: set[str] = set()
    open_: dict[str, _Period] = {}  # by hold id
    per_attendee: defaultdict[str, set[str]] = defaultdict(set)  # ids with an open period
    for entry in entries:
        hold_id = str(entry.hold_id)
        hold = stored.get((tenant, hold_id))
        if hold is None:
            continue  # logged but not stored: the token rule reports it
        if entry.action == "hold.create" and hold_id not in created:
            created.add(hold_id)
            started: _Period | None = _Period(hold, hold.expires_at)
        elif entry.action == "hold.commit" and hold_id in created:
            started = _Period(hold, None)
        elif entry.action in _ENDS:
            started = None
        else:
            continue
        if open_.pop(hold_id, None) is not None:
            for attendee in hold.attendees:
                per_attendee[attendee].discard(hold_id)
        if started is None or not started.blocks_at(entry.at):
            continue
        for attendee in hold.attendees:
            for other in sorted(per_attendee[attendee] - {hold_id}):
                period = open_[other]
                if period.blocks_at(entry.at) and _slots_overlap(period.hold, hold):
                    yield attendee, period.hold, hold, entry
            per_attendee[attendee].add(hold_id)
        open_[hold_id] = started


def _stored_overlaps(holds: Iterable[Hold], now: datetime) -> Iterable[tuple[str, Hold, Hold]]:
    """Pairs of holds that block at ``now`` as stored and overlap, per attendee."""
    per_attendee: defaultdict[tuple[str, str], list[Hold]] = defaultdict(list)
    for hold in holds:
        if hold.blocks_at(now):
            for attendee in hold.attendees:
                per_attendee[hold.tenant, attendee].append(hold)
    for (_, attendee), group in per_attendee.items():
        group.sort(key=lambda h: h.start)
        latest = group[0]
        for hold in group[1:]:
            if hold.start < latest.end:
                yield attendee, latest, hold
            if hold.end > latest.end:
                latest = hold


def _slots_overlap(a: Hold, b: Hold) -> bool:
    return a.start < b.end and b.start < a.end


def _slot(hold: Hold) -> str:
    return f"{hold.id} [{format_instant(hold.start)}, {format_instant(hold.end)})"
