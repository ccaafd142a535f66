"""The story of N seeded holds: who booked which slot when, and what became of it.

Pure numbers (instants in microseconds since the epoch, UTC), no encoding and no
database: :mod:`slotward.benchmarks.seed_rows` turns a :class:`Plan` into the
rows the service would have written. Every choice follows the service's rules,
so the history checker finds the story consistent:

- Each attendee's holds are laid out back to back, the last one ending at
  ``free_from``: a 15-minute grid (finer when one attendee has more than ~100
  holds, so the whole story stays within the ledger's 72 h retention, and the
  sweeper purges nothing while a benchmark runs).
- Every hold has one attendee and asks for a TTL of 300 s (some 600 or 900 s).
- A hold is created 5 min to 3 h before its start. Slots that started at least
  20 min ago end committed (86 %), released before or after their commit (3 %
  each), expired and swept by the sweeper within a second (4 %), or preempted
  (4 %: a priority-80 agent took the slot 5-280 s after the loser's create and
  committed it; both holds count). Slots starting later are committed, and
  those starting after ``now`` half of the time still held (a TTL of 3600 s,
  expiring after ``free_from``): no held hold is past its expiry unswept, as
  the sweeper (every second) would leave it.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from enum import Enum
from typing import Final

__all__ = ["AGENTS", "Event", "Fate", "Kind", "Plan", "PlannedHold", "plan_holds"]

SECOND: Final = 1_000_000
MINUTE: Final = 60 * SECOND
HOUR: Final = 60 * MINUTE
_SPAN: Final = 50 * HOUR  # one attendee's holds, back to back, on average
_GRID: Final = 15 * MINUTE
# Slot lengths in grid steps (2 on average), by cumulative probability.
_SIZES: Final = ((0.35, 1), (0.80, 2), (0.85, 3), (1.0, 4))
_TTLS: Final = ((0.7, 300), (0.9, 600), (1.0, 900))
_AGENT_SHARES: Final = ((0.2, 0), (0.4, 1), (0.6, 2), (0.75, 3), (0.9, 4), (1.0, 5))
_WINNER: Final = 5  # the index in AGENTS of the agent that preempts
# (agent id, priority): who books. The last one outranks the others.
AGENTS: Final = (
    ("calendar-agent", 50),
    ("sales-agent", 50),
    ("support-agent", 40),
    ("recruiting-agent", 30),
    ("travel-agent", 50),
    ("exec-assistant", 80),
)


class Fate(Enum):
    """What became of a hold, and so which events it has."""

    HELD = "held"
    COMMITTED = "committed"
    RELEASED = "released"  # released while held
    CANCELLED = "cancelled"  # committed, then released
    EXPIRED = "expired"
    PREEMPTED = "preempted"


class Kind(Enum):
    """One state change of a hold, in the order a transaction writes them."""

    PREEMPT = 0  # the loser's, written before the winner's create
    CREATE = 1
    COMMIT = 2
    RELEASE = 3
    EXPIRE = 4


@dataclass(slots=True)
class PlannedHold:
    attendee: int
    start_us: int
    end_us: int
    created_us: int
    ttl_s: int
    agent: int
    fate: Fate
    committed_us: int | None = None
    ended_us: int | None = None  # released, swept or preempted at
    winner: int | None = None  # the index of the hold that preempted this one
    seq: int = 0  # the audit seq of its create, once written


# (at_us, the hold whose transaction wrote it, order within it, kind, hold): sorts in time
Event = tuple[int, int, int, Kind, int]


@dataclass(frozen=True)
class Plan:
    now_us: int
    free_from_us: int
    attendees: int
    holds: list[PlannedHold]
    events: list[Event]  # sorted: the audit log's order


def plan_holds(count: int, per_attendee: int, now_us: int, rng: random.Random) -> Plan:
    """Plan ``count`` holds over ``ceil(count / per_attendee)`` attendees."""
    if count < 1 or not 1 <= per_attendee <= 1000:
        raise ValueError("count must be >= 1 and holds_per_attendee 1-1000")
    free_from = -(-(now_us + 30 * MINUTE) // _GRID) * _GRID
    grid = max(MINUTE, min(_GRID, _SPAN // (2 * per_attendee) // MINUTE * MINUTE))
    holds: list[PlannedHold] = []
    attendees = -(-count // per_attendee)
    for attendee in range(attendees):
        n = min(per_attendee, count - attendee * per_attendee)
        _lay_out(holds, attendee, n, free_from, now_us, grid, rng)
    return Plan(now_us, free_from, attendees, holds, _events(holds))


def _lay_out(
    holds: list[PlannedHold],
    attendee: int,
    n: int,
    end: int,
    now: int,
    grid: int,
    rng: random.Random,
) -> None:
    """Append ``n`` holds of one attendee, from the last slot backwards."""
    while n > 0:
        start = end - grid * _pick(rng, _SIZES)
        n -= _slot(holds, attendee, start, end, now, n, rng)
        end = start


def _slot(
    holds: list[PlannedHold],
    attendee: int,
    start: int,
    end: int,
    now: int,
    room: int,
    rng: random.Random,
) -> int:
    """Append the hold(s) of one slot; return how many."""
    if start > now + MINUTE:  # still to come: booked in the last few minutes
        if rng.random() < 0.5:
            created = now - _between(rng, 5 * SECOND, 10 * MINUTE)
            agent = _pick(rng, _AGENT_SHARES)
            holds.append(PlannedHold(attendee, start, end, created, 3600, agent, Fate.HELD))
            return 1
        created = now - _between(rng, 5 * MINUTE, 10 * MINUTE)
        holds.append(_committed(attendee, start, end, created, _pick(rng, _AGENT_SHARES), rng))
        return 1
    created = start - _lead(rng)
    draw = rng.random() if start <= now - 20 * MINUTE else 1.0
    if draw < 0.04 and room >= 2:
        return _preempted(holds, attendee, start, end, created, rng)
    ttl = _pick(rng, _TTLS)
    hold = _committed(attendee, start, end, created, _pick(rng, _AGENT_SHARES), rng, ttl)
    if draw < 0.07:
        hold.fate, hold.committed_us = Fate.RELEASED, None
        hold.ended_us = created + _between(rng, 5 * SECOND, (ttl - 5) * SECOND)
    elif draw < 0.10:
        assert hold.committed_us is not None
        hold.fate = Fate.CANCELLED
        hold.ended_us = _between(rng, hold.committed_us + SECOND, start)
    elif draw < 0.14:
        hold.fate, hold.committed_us = Fate.EXPIRED, None
        hold.ended_us = created + ttl * SECOND + _between(rng, SECOND // 20, SECOND)
    holds.append(hold)
    return 1


def _preempted(
    holds: list[PlannedHold],
    attendee: int,
    start: int,
    end: int,
    created: int,
    rng: random.Random,
) -> int:
    loser = PlannedHold(attendee, start, end, created, 300, rng.randrange(_WINNER), Fate.PREEMPTED)
    loser.winner = len(holds) + 1
    loser.ended_us = created + _between(rng, 5 * SECOND, 280 * SECOND)
    holds.append(loser)
    holds.append(_committed(attendee, start, end, loser.ended_us, _WINNER, rng))
    return 2


def _committed(
    attendee: int,
    start: int,
    end: int,
    created: int,
    agent: int,
    rng: random.Random,
    ttl: int = 300,
) -> PlannedHold:
    hold = PlannedHold(attendee, start, end, created, ttl, agent, Fate.COMMITTED)
    hold.committed_us = created + _between(rng, 2 * SECOND, 240 * SECOND)
    return hold


def _pick(rng: random.Random, shares: tuple[tuple[float, int], ...]) -> int:
    """A value drawn by cumulative probability (``random.choices`` costs ~5x more)."""
    draw = rng.random()
    return next(value for upto, value in shares if draw < upto)


def _between(rng: random.Random, lo: int, hi: int) -> int:
    return lo + int(rng.random() * (hi - lo))


def _lead(rng: random.Random) -> int:
    """How long before its start a slot was booked."""
    if rng.random() < 0.6:
        return _between(rng, 5 * MINUTE, HOUR)
    return _between(rng, HOUR, 3 * HOUR)


def _events(holds: list[PlannedHold]) -> list[Event]:
    """Every state change, in the order the service would have logged them."""
    out: list[Event] = []
    add = out.append
    for i, h in enumerate(holds):
        add((h.created_us, i, 1, Kind.CREATE, i))
        if h.committed_us is not None:
            add((h.committed_us, i, 2, Kind.COMMIT, i))
        if h.ended_us is not None:
            if h.fate is Fate.PREEMPTED:
                assert h.winner is not None  # the winner's transaction logs it first
                add((h.ended_us, h.winner, 0, Kind.PREEMPT, i))
            elif h.fate is Fate.EXPIRED:
                add((h.ended_us, i, 4, Kind.EXPIRE, i))
            else:
                add((h.ended_us, i, 3, Kind.RELEASE, i))
    out.sort()
    return out
