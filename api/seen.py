"""Which creates this process has answered: the ones worth a replay lookup first.

A create's replay checks (its idempotency record, a live hold of the same
intent) are authoritative only on the writer, inside the write's transaction:
two processes, or a retry racing its original, can only be told apart there.
A read before the write is a shortcut for replays, which stay reads. For a
call nobody has made before, it is a wasted hop: a reader thread, a read
transaction, the directory, the ledger and the holds looked up, then all of it
again on the writer. So each process remembers marks of the creates it
answered, and only a call with a mark it has seen is looked up first.

A mark is taken from the call as validated, before any attendee is resolved:
its tenant, workflow, attendees as given and interval in UTC (no step: a
retry that lost count of its steps is the same intent), and its client key if
it sent one. A reworded retry (email case, another UTC offset, ``end``
against a duration) has the same mark; one naming an attendee by id where the
first named the email does not, and is found on the writer instead, as is
every replay this process has not seen (answered by another process, or before
a restart). A false match costs one read, a missed one a write-side lookup:
neither changes an answer.

Bounded: the oldest marks are forgotten first.
"""

from __future__ import annotations

from collections.abc import Iterable

from slotward.engine.usecases.placing import HoldRequest

__all__ = ["CAPACITY", "SeenCreates", "marks_of"]

CAPACITY = 1 << 17  # marks kept: some 10 MB; the latest 65k creates at two marks each


def marks_of(req: HoldRequest) -> tuple[int, ...]:
    """The marks of a create: its intent as given, and its client key if any."""
    tenant = req.principal.tenant
    given = frozenset((a.kind, a.value) for a in req.attendees)
    intent = hash(("intent", tenant, req.workflow_id, given, req.interval.start,
                   req.interval.end))  # fmt: skip
    if req.client_key is None:
        return (intent,)
    return intent, hash(("key", tenant, req.client_key))


class SeenCreates:
    """Marks of the creates answered here, the latest ``capacity`` of them."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        if capacity < 1:
            raise ValueError("capacity must be positive")
        self._capacity = capacity
        self._marks: dict[int, None] = {}  # insertion-ordered: the oldest first

    def __len__(self) -> int:
        return len(self._marks)

    def any_seen(self, marks: Iterable[int]) -> bool:
        return any(m in self._marks for m in marks)

    def add(self, marks: Iterable[int]) -> None:
        for mark in marks:
            self._marks.pop(mark, None)  # seen again: the newest now
            self._marks[mark] = None
        while len(self._marks) > self._capacity:
            del self._marks[next(iter(self._marks))]
