"""The SSRF guard: a webhook URL may reach only the addresses engine/rules/urls.py allows.

A URL is checked twice: when a subscription names it (``UrlGuard.check``, a
clear 422 ``url_not_allowed``) and at every delivery, because DNS can change.
At delivery the check is the connection's own resolver (adapters/webhooks/
resolver.py's ``GuardedResolver``, kept apart so this module loads no aiohttp):
the addresses aiohttp connects to are the addresses that were checked, so a
name that answers a public address to the check and a private one to the
connect (DNS rebinding) has no window between the two.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable
from typing import Final

from slotward.engine.errors import ValidationFailed
from slotward.engine.rules.urls import Address, parse_target, refusal

__all__ = ["Resolve", "UrlGuard"]

Resolve = Callable[[str, int], Awaitable[list[str]]]
"""host, port -> the IP addresses it resolves to, as strings."""

_HINT: Final = "set SLOTWARD_ALLOW_PRIVATE_URLS=true to allow private and loopback targets"


class UrlGuard:
    """Which URLs and hosts a webhook may reach, under one ``allow_private`` setting."""

    def __init__(self, *, allow_private: bool, resolve: Resolve | None = None) -> None:
        self.allow_private = allow_private
        self._resolve = resolve or _getaddrinfo

    async def check(self, url: str) -> list[str]:
        """The addresses ``url``'s host resolves to, each one allowed.

        Raises ValidationFailed: ``invalid_url`` (engine/rules/urls.py), or
        ``url_not_allowed`` when the host does not resolve or ANY of its
        addresses is refused (a receiver is reached at whichever one answers).
        """
        target = parse_target(url)
        return [str(address) for address in await self.addresses(target.host, target.port)]

    async def addresses(self, host: str, port: int) -> list[Address]:
        """``host``'s addresses, all allowed (an IP literal is not resolved), or
        ValidationFailed ``url_not_allowed``."""
        literal = _literal(host)
        if literal is not None:
            self._judge(host, literal, "is")
            return [literal]
        try:
            found = [ipaddress.ip_address(text) for text in await self._resolve(host, port)]
        except (OSError, ValueError, UnicodeError):
            found = []
        if not found:
            raise ValidationFailed(f"host {host!r} does not resolve", code="url_not_allowed")
        for address in found:
            self._judge(host, address, "resolves to")
        return list(dict.fromkeys(found))

    def _judge(self, host: str, address: Address, verb: str) -> None:
        why = refusal(address, allow_private=self.allow_private)
        if why is None:
            return
        said = "" if verb == "is" else f" {address},"
        detail = f"host {host!r} {verb}{said} {why}"
        if not self.allow_private and refusal(address, allow_private=True) is None:
            detail = f"{detail}; {_HINT}"
        raise ValidationFailed(detail, code="url_not_allowed")


def _literal(host: str) -> Address | None:
    try:
        return ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return None


async def _getaddrinfo(host: str, port: int) -> list[str]:
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos if info[0] in (socket.AF_INET, socket.AF_INET6)]
