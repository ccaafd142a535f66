"""When the relay tries a delivery again, and when it gives up.

Standard Webhooks' schedule by default: immediately, then 5 s, 5 min, 30 min,
2 h, 5 h, 10 h, 14 h, 20 h and 24 h after each failure; an event that fails
its last attempt is dead. Each wait is jittered (so the deliveries that failed
together do not all come back together) and never shorter than a receiver's
``Retry-After``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import datetime, timedelta

from slotward.engine.model import DeliveryState

__all__ = ["DEFAULT_SCHEDULE", "Outcome", "RelaySettings", "next_attempt", "settled_state"]

DEFAULT_SCHEDULE: tuple[float, ...] = (
    0.0, 5.0, 300.0, 1800.0, 7200.0, 18000.0, 36000.0, 50400.0, 72000.0, 86400.0
)  # fmt: skip
MAX_RETRY_AFTER = 86400.0  # a receiver's Retry-After is honoured up to a day


@dataclass(frozen=True)
class RelaySettings:
    """How the relay delivers: the schedule (seconds before each attempt, the
    first one's included), the HTTP timeout, the claim lease and when a
    failing subscription is disabled."""

    schedule: tuple[float, ...] = DEFAULT_SCHEDULE
    timeout: float = 15.0
    disable_after: timedelta = timedelta(days=5)
    jitter: float = 0.1  # each wait is stretched or shrunk by up to this fraction
    batch: int = 256
    interval: float = 0.2  # how often an idle relay looks for work

    @property
    def lease(self) -> timedelta:
        """A claim outlives the longest attempt, so a live relay keeps its batch."""
        return timedelta(seconds=self.timeout + 10.0)

    @property
    def attempts(self) -> int:
        return len(self.schedule)


def next_attempt(
    settings: RelaySettings,
    attempts: int,
    now: datetime,
    retry_after: float | None,
    rand: Callable[[], float],
) -> datetime | None:
    """When to try again after ``attempts`` tries failed; None: give up (dead).

    ``rand`` returns a float in [0, 1): the jitter's source.
    """
    if attempts >= settings.attempts:
        return None
    wait = settings.schedule[attempts] * (1 + settings.jitter * (2 * rand() - 1))
    if retry_after is not None:
        wait = max(wait, min(retry_after, MAX_RETRY_AFTER))
    return now + timedelta(seconds=max(wait, 0.0))


def settled_state(states: Collection[DeliveryState | str]) -> DeliveryState:
    """An event's state from its deliveries': pending while any is, then dead if any
    is, else delivered (none at all included)."""
    if "pending" in states:
        return "pending"
    return "dead" if "dead" in states else "delivered"


@dataclass(frozen=True)
class Outcome:
    """What one delivery attempt got: a status, or an error with no status.

    ``retry_after``: the receiver's Retry-After in seconds (from a 429 or 503).
    ``error`` is one short line naming what failed, never a header or a secret.
    """

    status: int | None
    error: str | None
    retry_after: float | None = None

    @property
    def ok(self) -> bool:
        """A 2xx: the receiver has the event. Anything else, a 3xx included, is a failure."""
        return self.status is not None and 200 <= self.status < 300

    @property
    def gone(self) -> bool:
        """410 Gone: the receiver asks slotward to stop (the subscription is disabled)."""
        return self.status == 410
