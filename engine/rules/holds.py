"""The hold state machine: ``apply(hold, event, now) -> (hold, events)``.

Every transition bumps the hold's event sequence (each is announced by one
outbox event). Every transition but held -> expired bumps the fencing token, so the owner's
token still allows a late commit of an expired hold (whose slot the use case
re-checks in the same transaction).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

from slotward.engine.errors import Conflict
from slotward.engine.model import Hold, HoldStatus

__all__ = ["Commit", "Event", "Expire", "Preemption", "Release", "apply"]


@dataclass(frozen=True)
class Commit:
    token: int


@dataclass(frozen=True)
class Release:
    pass


@dataclass(frozen=True)
class Expire:
    pass


@dataclass(frozen=True)
class Preemption:
    """The event: a claim of higher priority, hold ``by``, took this hold's slot."""

    by: str


Event = Commit | Release | Expire | Preemption

_H, _C, _R, _E, _P = (
    HoldStatus.HELD,
    HoldStatus.COMMITTED,
    HoldStatus.RELEASED,
    HoldStatus.EXPIRED,
    HoldStatus.PREEMPTED,
)

# (status seen at `now`, event) -> new status; None means "stays as it is"
# (the goal of the call already holds). Pairs missing from the table refuse.
_TABLE: dict[tuple[HoldStatus, type[Event]], HoldStatus | None] = {
    (_H, Commit): _C,
    (_H, Release): _R,
    (_H, Expire): _E,
    (_H, Preemption): _P,
    (_C, Release): _R,
    (_E, Commit): _C,
    (_E, Release): _R,  # terminal: a late commit must not revive a given-up hold
    (_E, Expire): None,
    (_R, Release): None,
    (_P, Release): None,
}

_REFUSALS: dict[HoldStatus, tuple[str, str]] = {
    _C: ("hold_committed", "the hold is already committed"),
    _R: ("hold_released", "the hold was released"),
    _E: ("hold_expired", "the hold expired"),
    _P: ("hold_preempted", "the hold was preempted by a claim of higher priority"),
}


def apply(hold: Hold, event: Event, now: datetime) -> tuple[Hold, bool]:
    """Apply ``event``; return the new hold and whether anything changed.

    Raises :class:`Conflict` with the stable code of the refusal (for example
    ``hold_preempted`` or ``token_mismatch``).
    """
    # Expiry acts on the stored status: the sweeper catches a held hold up with
    # what readers already see. Everything else acts on what readers see.
    seen = hold.status if isinstance(event, Expire) else hold.status_at(now)
    key = (seen, type(event))
    if key not in _TABLE:
        code, detail = _REFUSALS.get(seen, ("invalid_transition", "transition not allowed"))
        raise Conflict(f"{detail}; cannot {type(event).__name__.lower()}", code=code)
    if isinstance(event, Commit) and event.token != hold.token:
        raise Conflict(
            f"token {event.token} is not the hold's current token",
            code="token_mismatch",
        )
    target = _TABLE[key]
    if target is None:
        return hold, False
    return _moved(hold, target, event, now), True


def _moved(hold: Hold, target: HoldStatus, event: Event, now: datetime) -> Hold:
    bump = 0 if target is HoldStatus.EXPIRED else 1
    return replace(
        hold,
        status=target,
        token=hold.token + bump,
        updated_at=now,
        committed_at=now if target is HoldStatus.COMMITTED else hold.committed_at,
        preempted_by=event.by if isinstance(event, Preemption) else hold.preempted_by,
        event_seq=hold.event_seq + 1,  # every change is announced by one event
    )
