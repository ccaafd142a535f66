"""The hold state machine: every (status x event) pair of ``apply``.

Statuses are what a reader sees at ``now``; a held hold past its ``expires_at``
is expired whether or not the sweeper stored that yet, so it gets its own rows.
Every transition but held -> expired bumps the fencing token.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

import pytest

from slotward.api.http.statuses import status_of
from slotward.engine.errors import Conflict
from slotward.engine.model import Hold, HoldStatus
from slotward.engine.rules.holds import Commit, Event, Expire, Preemption, Release, apply

NOW = datetime(2030, 10, 1, 9, 0, tzinfo=UTC)
TOKEN = 4
WINNER = "hold_winner"

H, C, R, E, P = (
    HoldStatus.HELD,
    HoldStatus.COMMITTED,
    HoldStatus.RELEASED,
    HoldStatus.EXPIRED,
    HoldStatus.PREEMPTED,
)


def make_hold(status: HoldStatus, expires_at: datetime) -> Hold:
    return Hold(
        id="hold_1",
        key="idem_1",
        tenant="acme",
        workflow_id="wf-1",
        agent_id="agent-a",
        attendees=("att_bob",),
        start=NOW + timedelta(hours=1),
        end=NOW + timedelta(hours=2),
        title="Sync",
        description=None,
        priority=50,
        status=status,
        expires_at=expires_at,
        token=TOKEN,
        intent_fp="fp",
        created_at=NOW - timedelta(minutes=10),
        updated_at=NOW - timedelta(minutes=10),
        audit_seq=1,
        committed_at=NOW - timedelta(minutes=5) if status is C else None,
        preempted_by="hold_earlier" if status is P else None,
    )


# The stored status and expiry of each starting point, by name.
STATES: dict[str, tuple[HoldStatus, datetime]] = {
    "held": (H, NOW + timedelta(minutes=5)),
    "held_past_expiry": (H, NOW - timedelta(seconds=1)),
    "held_at_expiry": (H, NOW),
    "expired": (E, NOW - timedelta(minutes=1)),
    "committed": (C, NOW - timedelta(minutes=1)),
    "released": (R, NOW + timedelta(minutes=5)),
    "preempted": (P, NOW + timedelta(minutes=5)),
}

EVENTS: dict[str, Event] = {
    "commit": Commit(TOKEN),
    "commit_wrong_token": Commit(TOKEN + 1),
    "release": Release(),
    "expire": Expire(),
    "preempt": Preemption(WINNER),
}


@dataclass(frozen=True)
class Moves:
    to: HoldStatus
    bumps: bool


@dataclass(frozen=True)
class Stays:
    """The goal of the call already holds: the hold comes back unchanged."""

    seen: HoldStatus


@dataclass(frozen=True)
class Refuses:
    code: str


Outcome = Moves | Stays | Refuses

_EXPIRED_ROWS: dict[str, Outcome] = {
    "commit": Moves(C, bumps=True),
    "commit_wrong_token": Refuses("token_mismatch"),
    # Releasing an expired hold makes it final, so a late commit cannot revive it.
    "release": Moves(R, bumps=True),
    "expire": Stays(E),
    "preempt": Refuses("hold_expired"),
}

TABLE: dict[str, dict[str, Outcome]] = {
    "held": {
        "commit": Moves(C, bumps=True),
        "commit_wrong_token": Refuses("token_mismatch"),
        "release": Moves(R, bumps=True),
        "expire": Moves(E, bumps=False),
        "preempt": Moves(P, bumps=True),
    },
    # The sweeper has not run yet: expiring stores the status, the token is kept.
    "held_past_expiry": {**_EXPIRED_ROWS, "expire": Moves(E, bumps=False)},
    "held_at_expiry": {**_EXPIRED_ROWS, "expire": Moves(E, bumps=False)},
    "expired": _EXPIRED_ROWS,
    "committed": {
        "commit": Refuses("hold_committed"),
        "commit_wrong_token": Refuses("hold_committed"),
        "release": Moves(R, bumps=True),
        "expire": Refuses("hold_committed"),
        "preempt": Refuses("hold_committed"),
    },
    "released": {
        "commit": Refuses("hold_released"),
        "commit_wrong_token": Refuses("hold_released"),
        "release": Stays(R),
        "expire": Refuses("hold_released"),
        "preempt": Refuses("hold_released"),
    },
    "preempted": {
        "commit": Refuses("hold_preempted"),
        "commit_wrong_token": Refuses("hold_preempted"),
        "release": Stays(P),
        "expire": Refuses("hold_preempted"),
        "preempt": Refuses("hold_preempted"),
    },
}

CASES = [
    pytest.param(state, event, outcome, id=f"{state}-{event}")
    for state, row in TABLE.items()
    for event, outcome in row.items()
]


def test_the_table_covers_every_status_and_event() -> None:
    seen_statuses = {STATES[state][0] for state in TABLE} | {
        make_hold(*STATES[state]).status_at(NOW) for state in TABLE
    }
    assert seen_statuses == set(HoldStatus)
    for row in TABLE.values():
        assert set(row) == set(EVENTS)
    assert {type(e) for e in EVENTS.values()} == {Commit, Release, Expire, Preemption}


@pytest.mark.parametrize(("state", "event", "outcome"), CASES)
def test_apply(state: str, event: str, outcome: Outcome) -> None:
    hold = make_hold(*STATES[state])
    if isinstance(outcome, Refuses):
        with pytest.raises(Conflict) as info:
            apply(hold, EVENTS[event], NOW)
        assert info.value.code == outcome.code
        assert status_of(info.value) == 409
        assert info.value.retryable is False
        return

    moved, changed = apply(hold, EVENTS[event], NOW)

    if isinstance(outcome, Stays):
        assert changed is False
        assert moved == hold
        assert moved.status_at(NOW) is outcome.seen
        return

    assert changed is True
    assert moved.status is outcome.to
    assert moved.status_at(NOW) is outcome.to
    assert moved.token == TOKEN + (1 if outcome.bumps else 0)
    assert moved.updated_at == NOW
    assert moved.event_seq == hold.event_seq + 1  # one event announces each change
    if outcome.to is C:
        assert moved.committed_at == NOW
    else:
        assert moved.committed_at == hold.committed_at
    if outcome.to is P:
        assert moved.preempted_by == WINNER
    else:
        assert moved.preempted_by == hold.preempted_by
    # Nothing but the transition's own fields moved.
    unchanged = replace(
        moved,
        status=hold.status,
        token=hold.token,
        updated_at=hold.updated_at,
        committed_at=hold.committed_at,
        preempted_by=hold.preempted_by,
        event_seq=hold.event_seq,
    )
    assert unchanged == hold


def test_status_is_checked_before_the_token() -> None:
    hold = make_hold(P, NOW)
    with pytest.raises(Conflict) as info:
        apply(hold, Commit(TOKEN + 7), NOW)
    assert info.value.code == "hold_preempted"


def test_the_owners_token_still_commits_after_expiry() -> None:
    held = make_hold(H, NOW + timedelta(minutes=5))
    later = NOW + timedelta(minutes=6)
    expired, _ = apply(held, Expire(), later)
    committed, changed = apply(expired, Commit(held.token), later)
    assert changed is True
    assert committed.status is C
    assert committed.token == held.token + 1


def test_a_token_from_before_a_transition_is_stale() -> None:
    held = make_hold(H, NOW + timedelta(minutes=5))
    committed, _ = apply(held, Commit(TOKEN), NOW)
    released, _ = apply(committed, Release(), NOW)
    assert released.token == TOKEN + 2
    with pytest.raises(Conflict) as info:
        apply(released, Commit(TOKEN + 1), NOW)
    assert info.value.code == "hold_released"
