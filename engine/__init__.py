"""The coordination core: pure rules and use cases, no I/O of its own."""

from slotward.engine.clock import FixedClock, SystemClock, TimeOrderedIds
from slotward.engine.errors import (
    BodyTooLarge,
    Conflict,
    Forbidden,
    InProgress,
    InvalidRequest,
    MalformedBody,
    NotFound,
    SlotConflict,
    SlotwardError,
    Unauthenticated,
    Unavailable,
    ValidationFailed,
)
from slotward.engine.fakes import InMemoryStore, InMemoryUnitOfWork, SequentialIds
from slotward.engine.model import Hold, HoldStatus, LedgerRecord, Principal, Reply
from slotward.engine.ports import Clock, IdGenerator, Store, UnitOfWork
from slotward.engine.rules.policy import Policy
from slotward.engine.usecases.lifecycle import HoldAction, commit_hold, expire_due, release_hold
from slotward.engine.usecases.placing import HoldRequest, lookup_replay, place_hold

__all__ = [
    "BodyTooLarge",
    "Clock",
    "Conflict",
    "FixedClock",
    "Forbidden",
    "Hold",
    "HoldAction",
    "HoldRequest",
    "HoldStatus",
    "IdGenerator",
    "InMemoryStore",
    "InMemoryUnitOfWork",
    "InProgress",
    "InvalidRequest",
    "LedgerRecord",
    "MalformedBody",
    "NotFound",
    "Policy",
    "Principal",
    "Reply",
    "SequentialIds",
    "SlotConflict",
    "SlotwardError",
    "Store",
    "SystemClock",
    "TimeOrderedIds",
    "Unauthenticated",
    "Unavailable",
    "UnitOfWork",
    "ValidationFailed",
    "commit_hold",
    "expire_due",
    "lookup_replay",
    "place_hold",
    "release_hold",
]
