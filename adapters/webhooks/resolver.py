"""The connection's resolver: aiohttp connects only to addresses the guard allowed.

The addresses the connector is handed are the addresses that were checked
(adapters/webhooks/guard.py), so no DNS answer can change between the check
and the connection (DNS rebinding).
"""

from __future__ import annotations

import socket
from typing import Final

from aiohttp.abc import AbstractResolver, ResolveResult

from slotward.adapters.webhooks.guard import UrlGuard
from slotward.engine.errors import ValidationFailed

__all__ = ["GuardedResolver", "RefusedAddress"]

# The addresses handed over are numeric: the connector must not resolve them again.
_NUMERIC: Final = socket.AI_NUMERICHOST | socket.AI_NUMERICSERV


class RefusedAddress(OSError):
    """A connection's host resolved to a refused address (the detail says which).

    An OSError, so aiohttp reports it as a ``ClientConnectorDNSError`` and never
    connects."""


class GuardedResolver(AbstractResolver):
    """An aiohttp resolver that hands the connector only addresses the guard allows.

    aiohttp resolves no IP literal: a caller checks those itself first
    (``UrlGuard.addresses``), as adapters/webhooks/sender.py does.
    """

    def __init__(self, guard: UrlGuard) -> None:
        self._guard = guard

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_INET
    ) -> list[ResolveResult]:
        try:
            addresses = await self._guard.addresses(host, port)
        except ValidationFailed as exc:
            raise RefusedAddress(exc.detail) from None
        results: list[ResolveResult] = [
            {
                "hostname": host,
                "host": str(address),
                "port": port,
                "family": socket.AF_INET if address.version == 4 else socket.AF_INET6,
                "proto": socket.IPPROTO_TCP,
                "flags": _NUMERIC,
            }
            for address in addresses
        ]
        if family in (socket.AF_INET, socket.AF_INET6):
            results = [r for r in results if r["family"] == family]
        if not results:
            raise RefusedAddress(f"host {host!r} has no address of the family asked for")
        return results

    async def close(self) -> None:
        return None
