"""HTTP for the CalDAV adapter: one guarded connection pool, and what an answer is.

Every connection goes through the SSRF guard (adapters/webhooks/resolver.py:
an IP literal is checked here, a host name by the connection's resolver),
redirects are not followed, answers are read up to a cap, no proxy or cookie
is taken from anywhere. A request that gets no answer raises :class:`Failed`
with one short line saying why: never the request's URL, headers or
credentials (aiohttp's own messages quote the URL, so only their class or
the OS's reason is kept).
"""

from __future__ import annotations

import base64
import ipaddress
import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

import aiohttp

from slotward.adapters.retry_after import retry_after_seconds
from slotward.adapters.webhooks.guard import Resolve, UrlGuard
from slotward.adapters.webhooks.resolver import GuardedResolver, RefusedAddress
from slotward.engine.calendars import Connection, ProviderSettings
from slotward.engine.clock import SystemClock
from slotward.engine.errors import ValidationFailed
from slotward.engine.ports import Clock
from slotward.engine.rules.urls import parse_target

__all__ = ["Answer", "DavClient", "Failed"]

_CONNECTIONS: Final = 64
_MAX_ERROR: Final = 300
_XML: Final = "application/xml; charset=utf-8"


@dataclass(frozen=True)
class Answer:
    status: int
    headers: Mapping[str, str]
    body: bytes


class Failed(Exception):
    """A request got no answer; the message says why (no secret in it)."""


class _TooLarge(Exception):
    pass


class DavClient:
    """Requests to calendars, as a Connection's user, through the guard."""

    def __init__(
        self, settings: ProviderSettings, *, resolve: Resolve | None, clock: Clock | None
    ) -> None:
        self._settings = settings
        self._guard = UrlGuard(allow_private=settings.allow_private_urls, resolve=resolve)
        self._clock = clock or SystemClock()
        self._session: aiohttp.ClientSession | None = None

    async def request(
        self,
        conn: Connection,
        method: str,
        url: str,
        body: bytes,
        *,
        cap: int,
        depth: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Answer:
        """One request and its answer, its body read up to ``cap`` bytes; Failed
        when there is none (busy turns it into ProviderUnreachable)."""
        await self._check(url)
        sent = {"User-Agent": self._settings.user_agent, **(headers or {})}
        if method == "REPORT":
            sent["Content-Type"] = _XML
        if depth is not None:
            sent["Depth"] = depth
        if conn.username is not None:
            sent["Authorization"] = _basic(conn.username, conn.password or "")
        try:
            async with self._pool().request(
                method,
                url,
                data=body or None,
                headers=sent,
                allow_redirects=False,
                timeout=aiohttp.ClientTimeout(total=self._settings.timeout),
            ) as response:
                data = await _read(response, cap)
                return Answer(response.status, response.headers, data)
        except _TooLarge:
            raise Failed(f"the answer to {method} is larger than {cap // 1024} KiB") from None
        except TimeoutError:
            raise Failed(f"timed out after {self._settings.timeout:g} s") from None
        except aiohttp.ClientConnectorDNSError as exc:
            if isinstance(exc.os_error, RefusedAddress):
                raise Failed(_short(f"url_not_allowed: {exc.os_error}")) from None
            raise Failed("the calendar's host does not resolve") from None
        except aiohttp.ClientConnectorCertificateError as exc:
            raise Failed(f"TLS certificate refused: {_reason(exc.certificate_error)}") from None
        except aiohttp.ClientSSLError as exc:
            raise Failed(f"TLS error: {_reason(exc.os_error)}") from None
        except aiohttp.ClientConnectorError as exc:
            raise Failed(f"connection failed: {_reason(exc.os_error)}") from None
        except aiohttp.ServerDisconnectedError:
            raise Failed("the server closed the connection without an answer") from None
        except (aiohttp.ClientError, ssl.SSLError, OSError) as exc:
            # The class name only: aiohttp's messages may quote the request's URL.
            raise Failed(f"{type(exc).__name__}") from None

    async def _check(self, url: str) -> None:
        try:
            target = parse_target(url)
            if _is_literal(target.host):  # aiohttp does not resolve these: check here
                await self._guard.addresses(target.host, target.port)
        except ValidationFailed as exc:
            raise Failed(_short(f"{exc.code}: {exc.detail}")) from None

    def _pool(self) -> aiohttp.ClientSession:
        # Made on first use: a session belongs to the running event loop.
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(
                limit=_CONNECTIONS, resolver=GuardedResolver(self._guard)
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                trust_env=False,  # no proxy from the environment: it would bypass the guard
                cookie_jar=aiohttp.DummyCookieJar(),  # calendars share no state
            )
        return self._session

    def retry_after(self, value: str | None) -> float | None:
        return retry_after_seconds(value, self._clock.now())

    async def close(self) -> None:
        """Close the pool; a later call opens a new one."""
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()


def _basic(username: str, password: str) -> str:
    if ":" in username:  # Basic auth cannot carry it; the name alone is no secret
        raise Failed("a username for HTTP Basic auth has no ':'")
    token = base64.b64encode(f"{username}:{password}".encode())  # RFC 7617: UTF-8
    return f"Basic {token.decode('ascii')}"


async def _read(response: aiohttp.ClientResponse, cap: int) -> bytes:
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = await response.content.read(64 * 1024)
        if not chunk:
            return b"".join(chunks)
        size += len(chunk)
        if size > cap:
            raise _TooLarge
        chunks.append(chunk)


def _is_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _reason(exc: BaseException | None) -> str:
    if exc is None:
        return "unknown"
    text = getattr(exc, "strerror", None) or getattr(exc, "reason", None) or type(exc).__name__
    return str(text)


def _short(text: str) -> str:
    line = "".join(c if c.isprintable() else " " for c in text)
    return line if len(line) <= _MAX_ERROR else line[: _MAX_ERROR - 3] + "..."
