"""One webhook POST, and what came of it: the only place slotward sends HTTP out.

Every request goes through the SSRF guard (adapters/webhooks/guard.py): the IP
literal of a URL is checked here, a host name by the connection's resolver.
Redirects are not followed (a 3xx is a failure: following one would let a
receiver send slotward anywhere, past the guard's first check); the response
body is read up to 64 KiB and dropped. Network trouble is an ``Outcome``,
never an exception: the relay records it and tries again by its schedule.

An outcome's ``error`` is one short line for the attempt log, shown to admins:
it names what went wrong and never a header value, a secret or the body.
"""

from __future__ import annotations

import ipaddress
import ssl
from collections.abc import Mapping
from typing import Final
from urllib.parse import urlsplit

import aiohttp
from multidict import CIMultiDict

from slotward.adapters.retry_after import retry_after_seconds
from slotward.adapters.webhooks.guard import Resolve, UrlGuard
from slotward.adapters.webhooks.resolver import GuardedResolver, RefusedAddress
from slotward.engine.clock import SystemClock
from slotward.engine.errors import ValidationFailed
from slotward.engine.ports import Clock
from slotward.engine.rules.delivery import Outcome
from slotward.engine.rules.urls import Target, parse_target

__all__ = ["Outcome", "WebhookSender"]

READ_LIMIT: Final = 64 * 1024
_MAX_ERROR: Final = 300
_CONNECTIONS: Final = 256  # one per delivery a relay has in flight (api/workers/relay.py)
_TARGETS_KEPT: Final = 1024  # parsed URLs remembered (one per subscription)


class WebhookSender:
    """POSTs webhook bodies over one shared, guarded connection pool."""

    def __init__(
        self,
        *,
        allow_private: bool,
        timeout: float,
        user_agent: str = "slotward-webhooks",
        resolve: Resolve | None = None,
        clock: Clock | None = None,
    ) -> None:
        self._guard = UrlGuard(allow_private=allow_private, resolve=resolve)
        self._timeout = timeout
        self._user_agent = user_agent
        self._clock = clock or SystemClock()
        self._session: aiohttp.ClientSession | None = None
        # parse_target is pure and costs about 150 us (IDNA): once per URL.
        self._targets: dict[str, Target] = {}

    async def send(self, url: str, headers: Mapping[str, str], body: bytes) -> Outcome:
        """POST ``body`` (JSON) to ``url`` with ``headers``; never raises for network trouble."""
        try:
            target = self._target(url)
            if _is_literal(target.host):  # aiohttp does not resolve these: check here
                await self._guard.addresses(target.host, target.port)
        except ValidationFailed as exc:
            return _failed(f"{exc.code}: {exc.detail}")
        sent = CIMultiDict({"User-Agent": self._user_agent})
        sent.update(headers)
        sent["Content-Type"] = "application/json"
        try:
            async with self._pool().post(
                url,
                data=body,
                headers=sent,
                allow_redirects=False,
                timeout=aiohttp.ClientTimeout(total=self._timeout),
            ) as response:
                await _drain(response)
                return self._outcome(response)
        except TimeoutError:
            return _failed(f"timed out after {self._timeout:g} s")
        except aiohttp.ClientConnectorDNSError as exc:
            if isinstance(exc.os_error, RefusedAddress):
                return _failed(f"url_not_allowed: {exc.os_error}")
            return _failed(f"host {target.host!r} does not resolve")
        except aiohttp.ClientConnectorCertificateError as exc:
            return _failed(f"TLS certificate refused: {_reason(exc.certificate_error)}")
        except aiohttp.ClientSSLError as exc:
            return _failed(f"TLS error: {_reason(exc.os_error)}")
        except aiohttp.ClientConnectorError as exc:
            return _failed(f"connection failed: {_reason(exc.os_error)}")
        except aiohttp.ServerDisconnectedError:
            return _failed("the receiver closed the connection without an answer")
        except (aiohttp.ClientError, ssl.SSLError, OSError) as exc:
            return _failed(f"{type(exc).__name__}: {_reason(exc)}")

    def _target(self, url: str) -> Target:
        target = self._targets.get(url)
        if target is None:
            target = parse_target(url)  # a refusal is not kept: it raises
            if len(self._targets) >= _TARGETS_KEPT:
                self._targets.clear()
            self._targets[url] = target
        return target

    async def close(self) -> None:
        """Close the pool; a later send opens a new one."""
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()

    def _pool(self) -> aiohttp.ClientSession:
        # Made on first use: a session belongs to the running event loop.
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(
                limit=_CONNECTIONS,
                resolver=GuardedResolver(self._guard),
            )
            self._session = aiohttp.ClientSession(
                connector=connector,
                trust_env=False,  # no proxy from the environment: it would bypass the guard
                auto_decompress=False,  # the body is dropped: no decompression bomb
                cookie_jar=aiohttp.DummyCookieJar(),  # receivers share no state
            )
        return self._session

    def _outcome(self, response: aiohttp.ClientResponse) -> Outcome:
        status = response.status
        if 200 <= status < 300:
            return Outcome(status, None, None)
        if 300 <= status < 400:
            where = _location(response.headers.get("Location"))
            return Outcome(status, _short(f"redirect to {where} not followed"), None)
        retry_after = None
        if status in (429, 503):
            retry_after = self._retry_after(response.headers.get("Retry-After"))
        return Outcome(status, f"HTTP {status}", retry_after)

    def _retry_after(self, value: str | None) -> float | None:
        return retry_after_seconds(value, self._clock.now())


async def _drain(response: aiohttp.ClientResponse) -> None:
    left = READ_LIMIT
    while left > 0:
        chunk = await response.content.read(left)
        if not chunk:
            return
        left -= len(chunk)


def _failed(error: str) -> Outcome:
    return Outcome(None, _short(error), None)


def _is_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _location(value: str | None) -> str:
    """Where a redirect pointed, without its query or credentials (they may be secrets)."""
    if not value:
        return "nowhere (no Location)"
    try:
        parts = urlsplit(value)
        shown = f"{parts.scheme}://{parts.hostname}{parts.path}" if parts.hostname else parts.path
    except ValueError:
        shown = "an unreadable Location"
    return repr(shown[:200])


def _reason(exc: BaseException | None) -> str:
    if exc is None:
        return "unknown"
    text = getattr(exc, "strerror", None) or getattr(exc, "reason", None) or str(exc)
    return str(text) or type(exc).__name__


def _short(text: str) -> str:
    line = "".join(c if c.isprintable() else " " for c in text)
    return line if len(line) <= _MAX_ERROR else line[: _MAX_ERROR - 3] + "..."
