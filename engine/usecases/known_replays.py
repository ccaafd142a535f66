"""Use case: replay a create this process has answered, checking only what can change.

A create's replay lookup (placing.lookup_replay) resolves the attendees, derives
the call's key and fingerprints, then reads the record and the hold. For a call
this process answered before, the key is already known: it was derived from the
same request and the same attendee ids. Of what decided it, only three things
can change in the store since, by any process: the directory (an email given
to an attendee, which would make it another intent; the directory API refuses
to move an email, but this does not lean on that), the record (purged after
its retention) and the hold's status. So those are read again, in one read
(Ledger.replay_state), and nothing else is computed again. When any of them is
not as it was, this answers None and the call takes the whole path.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from slotward.engine.model import Reply, status_at
from slotward.engine.ports import UnitOfWork
from slotward.engine.rules.fingerprint import public_key

__all__ = ["KnownCreate", "replay_known"]


@dataclass(frozen=True, slots=True)
class KnownCreate:
    """A create answered here, and what its answer was decided on.

    ``key``: its record's key, derived (not a client's key), so also the
    fingerprint stored with the record. ``emails`` and ``ids``: its attendees as
    the call named them (emails normalized); ``attendees``: the ids they
    resolved to, the hold's attendees.
    """

    tenant: str
    workflow_id: str
    key: str
    hold_id: str
    emails: tuple[str, ...]
    ids: tuple[str, ...]
    attendees: frozenset[str]


def replay_known(uow: UnitOfWork, known: KnownCreate, now: datetime) -> Reply | None:
    """The stored answer of ``known``, with its hold's status now; None if the
    attendees no longer resolve as they did, or the record is gone."""
    with uow:
        state = uow.ledger.replay_state(known.tenant, known.key, known.emails)
    if state is None or state.fingerprint != known.key:
        return None
    if known.emails:
        if len(state.directory) != len(known.emails):
            return None  # an email left the directory: resolved afresh
        if {*state.directory.values(), *known.ids} != known.attendees:
            return None  # an email now names another attendee: another intent
    status = None
    if state.hold_status is not None and state.hold_expires_at is not None:
        status = status_at(state.hold_status, state.hold_expires_at, now).value
    # Made whole at once: the fingerprint is the key (checked above), so this is
    # the stored answer replay_record would give, without a replace() after it.
    return Reply(
        created=state.created, body=state.body, key=public_key(state.key), replayed=True,
        hold_id=state.hold_id, workflow_id=known.workflow_id, hold_status=status,
    )  # fmt: skip
