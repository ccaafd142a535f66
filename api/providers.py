"""The calendar providers of one process: read a calendar now, refresh before a decision.

A read happens here, outside any transaction, with the binding's password
opened only for the adapter's :class:`Connection`; what it found is stored in
a transaction of its own (engine/usecases/provider_sync.py). A decision that
met a stale mirror (:class:`NeedsRefresh`) comes here to read the calendars
again: a calendar that cannot be read answers 503 ``provider_unavailable``
when its binding fails closed, or lets the decision go on on the mirror
(``last_known``). No aiohttp here: the adapters (adapters/providers) own their
connections.
"""

from __future__ import annotations

import asyncio
import logging
import math
from collections.abc import Mapping
from dataclasses import replace
from functools import partial
from typing import TYPE_CHECKING

from slotward.api.config import ProviderConfig
from slotward.api.secretbox import SecretBox
from slotward.engine.calendars import (
    BusyRead,
    CalendarBinding,
    Connection,
    ProviderError,
    ProviderUnreachable,
    Window,
)
from slotward.engine.errors import Unavailable
from slotward.engine.ports import CalendarProvider, UnitOfWork
from slotward.engine.rules.external import ExternalPolicy, NeedsRefresh
from slotward.engine.usecases.provider_sync import read_window, store_failure, store_read

if TYPE_CHECKING:
    from slotward.api.bootstrap import Services

__all__ = ["ProviderHub", "password_context"]

log = logging.getLogger("slotward.providers")

_RETRY_AFTER = 5  # seconds a fail-closed claim is told to wait when the provider said nothing
_MAX_RETRY_AFTER = 300  # a provider's own Retry-After is passed on up to this
_COVER_TRIES = 3  # reads of one calendar for one decision, when others store theirs first


def password_context(tenant: str, attendee: str) -> str:
    """What a binding's password is sealed to: a sealed value copied to another
    binding does not open there."""
    return f"calendar:{tenant}:{attendee}"


class ProviderHub:
    """The adapters by name, and the reads of calendars this process makes."""

    def __init__(
        self, providers: Mapping[str, CalendarProvider], box: SecretBox, config: ProviderConfig
    ) -> None:
        self._providers = dict(providers)
        self._box = box
        self.config = config

    def names(self) -> list[str]:
        return sorted(self._providers)

    def provider(self, name: str) -> CalendarProvider | None:
        return self._providers.get(name)

    @property
    def external(self) -> ExternalPolicy:
        """The staleness rule every decision starts from."""
        return self.config.external

    def connection(self, binding: CalendarBinding) -> Connection:
        """The binding as its adapter sees it, the password opened."""
        password = None
        if binding.password is not None:
            context = password_context(binding.tenant, binding.attendee)
            password = self._box.open(binding.password, context)
        return Connection(binding.url, binding.username, password, binding.timezone)

    async def read(
        self, svc: Services, binding: CalendarBinding, need: Window | None = None
    ) -> tuple[CalendarBinding, ProviderError | None]:
        """Read ``binding``'s calendar once and store what was found.

        Returns the binding as it is after the read (another read's result if
        that one stored first) and the error, if this read failed.
        """
        provider = self.provider(binding.provider)
        started = svc.clock.now()
        window = read_window(binding, started, self.external, need)
        interval = self.config.sync_interval
        # A cursor tells what changed within the window it was made for: another
        # window is read whole. Handed on, an adapter that keeps no window in its
        # cursor answered "unchanged" for a wider window, and the busy time beyond
        # the old one never reached the mirror the decision then trusted.
        same = (binding.covers_from, binding.covers_until) == (window.start, window.end)
        cursor = binding.cursor if same else None
        error: ProviderError | None = None
        try:
            if provider is None:
                raise ProviderUnreachable(f"no provider {binding.provider!r} in this server")
            try:
                conn = self.connection(binding)
            except ValueError:  # sealed under a key this server no longer has
                raise ProviderUnreachable(
                    "the password cannot be opened: was SLOTWARD_SECRET_KEY changed?"
                ) from None
            found = await self._busy(provider, conn, window, cursor)
            stored = await svc.store.write(
                partial(store_read, binding=binding, started=started, window=window,
                        read=found, interval=interval)
            )  # fmt: skip
        except ProviderError as exc:
            error = exc
        if error is not None:
            log.info(
                "calendar read failed",
                extra={"attendee": binding.attendee, "provider": binding.provider,
                       "error": str(error)[:200]},
            )  # fmt: skip
            stored = await svc.store.write(
                partial(store_failure, binding=binding, started=started, error=error,
                        interval=interval)
            )  # fmt: skip
        if stored is None:  # another read stored first: its result stands, good or bad
            current = await svc.store.read(partial(_current, binding=binding))
            stored = current if current is not None else binding
            if stored.status == "ok":
                error = None
            elif error is None:
                error = ProviderUnreachable(stored.error or "the calendar could not be read")
        return stored, error

    async def _busy(
        self, provider: CalendarProvider, conn: Connection, window: Window, cursor: str | None
    ) -> BusyRead:
        """The adapter's read, bounded in time; whatever else it raises (a plugin's
        bug) is the binding's failure, never a request's 500."""
        try:
            return await asyncio.wait_for(
                provider.busy(conn, window, cursor), timeout=self.config.settings.timeout * 3
            )
        except TimeoutError:
            raise ProviderUnreachable("the calendar did not answer in time") from None
        except ProviderError:
            raise
        except Exception as exc:
            log.exception("provider %s failed a read", provider.name)
            raise ProviderUnreachable(f"the adapter failed: {type(exc).__name__}") from None

    async def read_now(self, svc: Services, binding: CalendarBinding) -> CalendarBinding:
        """Read ``binding``'s calendar now; the binding as stored after it."""
        stored, _ = await self.read(svc, binding)
        return stored

    async def refresh(
        self, svc: Services, need: NeedsRefresh, policy: ExternalPolicy
    ) -> ExternalPolicy:
        """Read again the calendars a decision found stale; the policy to decide again with.

        Raises 503 ``provider_unavailable`` when a calendar could not be read
        and its binding fails closed.
        """
        reads = await asyncio.gather(*(self._read_covering(svc, b, need.window)
                                       for b in need.bindings))  # fmt: skip
        refreshed, unreachable = set(policy.refreshed), set(policy.unreachable)
        for binding, (_, error) in zip(need.bindings, reads, strict=True):
            if error is None:
                refreshed.add(binding.attendee)
            elif binding.on_unavailable == "last_known":
                unreachable.add(binding.attendee)
            else:
                retry = error.retry_after
                raise Unavailable(
                    f"the calendar of attendee {binding.attendee} could not be read "
                    f"({error}); its binding fails closed",
                    code="provider_unavailable",
                    retry_after=_RETRY_AFTER
                    if retry is None
                    else min(_MAX_RETRY_AFTER, max(1, math.ceil(retry))),
                )
        return replace(policy, refreshed=frozenset(refreshed), unreachable=frozenset(unreachable))

    async def _read_covering(
        self, svc: Services, binding: CalendarBinding, need: Window
    ) -> tuple[CalendarBinding, ProviderError | None]:
        """Read ``binding`` until its mirror covers ``need`` (a few tries).

        A read that lost the race to another (the sync worker's, over the
        mirror's narrower window) takes the winner's outcome: that mirror may
        not reach the decision's span, and deciding on it would miss busy time
        beyond it. So read again from the winner; a calendar that never comes
        to cover the span is an error (503 under fail_closed), never a guess.
        """
        stored, error = binding, None
        for _ in range(_COVER_TRIES):
            stored, error = await self.read(svc, stored, need)
            if error is not None or _covers(stored, need):
                return stored, error
        return stored, ProviderUnreachable("the calendar was read by others meanwhile; try again")

    async def close(self) -> None:
        for provider in self._providers.values():
            try:
                await provider.close()
            except Exception:  # a plugin's close must not stop the server's
                log.exception("closing provider %s failed", provider.name)


def _covers(binding: CalendarBinding, window: Window) -> bool:
    start, until = binding.covers_from, binding.covers_until
    return start is not None and until is not None and start <= window.start and window.end <= until


def _current(uow: UnitOfWork, binding: CalendarBinding) -> CalendarBinding | None:
    with uow:
        return uow.calendars.get(binding.tenant, binding.attendee)
