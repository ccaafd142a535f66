"""A decision on external busy time: read stale calendars again, outside any lock, then decide.

A use case that meets a mirror too old to decide on raises
:class:`NeedsRefresh` before writing anything. :func:`deciding` reads those
calendars (api/providers.py: 503 ``provider_unavailable`` when one cannot be
read and its binding fails closed) and runs the decision again with them
marked refreshed. A binding made between two rounds can ask once more; after
:data:`ROUNDS` the decision is refused as unavailable rather than looping.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TypeVar

from slotward.engine.errors import Unavailable
from slotward.engine.rules.external import ExternalPolicy, NeedsRefresh

if TYPE_CHECKING:
    from slotward.api.bootstrap import Services

__all__ = ["ROUNDS", "deciding"]

T = TypeVar("T")
ROUNDS = 3


async def deciding(svc: Services, decide: Callable[[ExternalPolicy], Awaitable[T]]) -> T:
    """``decide`` with the server's staleness rule, refreshing what it asks for."""
    policy = svc.providers.external
    for round_ in range(1, ROUNDS + 1):
        try:
            return await decide(policy)
        except NeedsRefresh as need:
            if round_ == ROUNDS:
                break  # a refresh now would go unused
            policy = await svc.providers.refresh(svc, need, policy)
    raise Unavailable(
        "the attendees' calendars changed while they were being read; try again",
        code="provider_unavailable",
        retry_after=1,
    )
