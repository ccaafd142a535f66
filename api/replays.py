"""Creates this process answered, by the request that made them: replayed cheaply.

An agent's retry sends the same request again, byte for byte (the Python
client does; so do most runtimes). The first answer of a create fixed its
record's key and the attendee ids it was decided on. So this process keeps,
for the latest creates it answered, the request as sent (the caller, the
route's body) and what its answer was decided on; when the same request
comes again, its replay reads back only what can have changed since
(engine/usecases/known_replays.py), skipping the body's validation, the
attendees' resolution and the fingerprints. Anything not as it was sends the
call down the whole path, which answers it as it always did.

Only creates without a client ``Idempotency-Key`` are kept: their key is
derived from the request, so it is the record's fingerprint too. Bounded:
the oldest are forgotten first (a retry comes soon after its call, or not at
all).
"""

from __future__ import annotations

import hashlib
from collections.abc import Hashable, Mapping
from typing import Any

import orjson

from slotward.engine.model import Reply
from slotward.engine.rules.attendees import AttendeeRef
from slotward.engine.usecases.known_replays import KnownCreate

__all__ = [
    "CAPACITY",
    "KnownCreates",
    "known_create",
    "sent_as",
    "tool_body_sent_as",
    "tool_call_sent_as",
]

CAPACITY = 1 << 14  # some 10 MB: a request's digest, and its key and ids, each


def sent_as(caller: Hashable, body: bytes) -> Hashable:
    """A request as it was sent: its caller and the SHA-256 of its body (not the body:
    a body may be large, and memory is kept for thousands)."""
    return caller, hashlib.sha256(body).digest()


def tool_call_sent_as(
    caller: Hashable, workflow_id: object, step: object, arguments: Mapping[str, Any]
) -> Hashable | None:
    """A create tool call as it was sent: its caller, its envelope's workflow and
    step, and its arguments as validated (an alias given for a name is the same
    call); None if they have no JSON form (never the case for a parsed call).

    Not the body's bytes: a tool call's body also holds what does not make the
    call (the model's call id, its other calls of a batch, its format). The key
    is another namespace than a hold body's, so the two never meet.
    """
    try:
        doc = orjson.dumps([workflow_id, step, arguments], option=orjson.OPT_SORT_KEYS)
    except TypeError:
        return None
    return sent_as(("tool-call", caller), doc)


def tool_body_sent_as(caller: Hashable, body: bytes) -> Hashable:
    """A single tool call's body as it was sent, byte for byte, by ``caller``.

    A second name for a create :func:`tool_call_sent_as` names: a retry sent
    as its call was is found by it before its body is decoded, translated and
    validated. Only for a body sent without a client key and without
    ``?reply=``, whose answer is then the create's own (api/http/tool_handlers.py).
    Its own namespace: never one of a hold body's or a parsed call's names.
    """
    return sent_as(("tool-call-body", caller), body)


def known_create(
    tenant: str, workflow_id: str, given: tuple[AttendeeRef, ...], reply: Reply
) -> KnownCreate | None:
    """What the fresh answer ``reply`` to a create was decided on; None if it
    cannot be replayed from it (not a new hold)."""
    if reply.replayed or not reply.created or reply.hold_id is None:
        return None
    attendees = reply.attendees  # the hold's, resolved
    if not attendees:  # not said beside the answer: the answer holds them
        attendees = tuple(orjson.loads(reply.body)["attendees"])
    return KnownCreate(
        tenant=tenant,
        workflow_id=workflow_id,
        key=reply.key,
        hold_id=reply.hold_id,
        emails=tuple(sorted({a.value for a in given if a.kind == "email"})),
        ids=tuple(sorted({a.value for a in given if a.kind == "id"})),
        attendees=frozenset(attendees),
    )


class KnownCreates:
    """The latest ``capacity`` creates answered here, by their request."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        if capacity < 1:
            raise ValueError("capacity must be positive")
        self._capacity = capacity
        self._known: dict[Hashable, KnownCreate] = {}  # insertion-ordered: the oldest first

    def __len__(self) -> int:
        return len(self._known)

    def __contains__(self, request: object) -> bool:
        return request in self._known

    def get(self, request: Hashable) -> KnownCreate | None:
        return self._known.get(request)

    def add(self, request: Hashable, known: KnownCreate) -> None:
        self._known.pop(request, None)
        self._known[request] = known
        while len(self._known) > self._capacity:
            del self._known[next(iter(self._known))]

    def forget(self, request: Hashable) -> None:
        self._known.pop(request, None)
