"""Use case: replay a create this process has answered, checking only what can change.

A create's replay lookup (placing.lookup_replay) resolves the attendees, derives
the call's key and fingerprints, then reads the record and the hold. For a call
this process answered before, the key is already known: it was derived from the
same request and the same attendee ids. Of what decided it, only three things
can change in the store since, by any process: the directory (an email moved to
another attendee, which makes it another intent), the record (purged after its
retention) and the hold's status. So those are read again, in one read
transaction, and nothing else is computed again. When any of them is not as it
was, this answers None and the call takes the whole path.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from slotward.engine.model import Reply
from slotward.engine.ports import UnitOfWork
from slotward.engine.usecases.placing import replay_record

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
        tenant = known.tenant
        if known.emails:
            directory, _ = uow.directory.lookup(tenant, known.emails, ())
            if len(directory) != len(known.emails):
                return None  # an email left the directory: resolved afresh
            if {*directory.values(), *known.ids} != known.attendees:
                return None  # an email now names another attendee: another intent
        record = uow.ledger.get(tenant, known.key)
        if record is None or record.fingerprint != known.key:
            return None
        reply = replace(replay_record(record, known.key), workflow_id=known.workflow_id)
        hold = None if reply.hold_id is None else uow.holds.get(tenant, reply.hold_id)
        return reply if hold is None else replace(reply, hold_status=hold.status_at(now).value)
