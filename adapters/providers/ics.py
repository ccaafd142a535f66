"""The ``ics`` provider: read-only busy time from an ICS URL or a local file.

http(s): a conditional GET (If-None-Match with the last ETag, If-Modified-Since
with the last Last-Modified), so an unchanged calendar costs a 304. The cursor
is the validators AND the window they were expanded for: expansion depends on
the window, so a cursor of another window fetches the whole file again.

Every connection goes through the SSRF guard (adapters/webhooks/guard.py): the
IP literal of a URL is checked here, a host name by the connection's resolver
(adapters/webhooks/resolver.py). Redirects are followed by hand, up to
:data:`MAX_REDIRECTS`, each target checked as the first URL was (aiohttp's own
following would check nothing but the resolver's rule, and follow any scheme).
The body is read up to ``ical.MAX_BYTES`` and no further.

file://: the file is read off the event loop; its cursor is its mtime, size and
the window. A file URL reads the server's own disk, so it is refused unless the
server allows private URLs (SLOTWARD_ALLOW_PRIVATE_URLS): the most private
target there is.

Messages name a calendar by scheme and host only: an ICS URL's secret is often
its path (a private feed's token), its query or its userinfo.
"""

from __future__ import annotations

import email.utils
import ipaddress
import json
import os
import ssl
import stat
from dataclasses import asdict, dataclass
from datetime import UTC
from typing import Final
from urllib.parse import unquote, urljoin, urlsplit

import aiohttp

from slotward.adapters.providers.ical import MAX_BYTES, in_parser, read_busy
from slotward.adapters.retry_after import retry_after_seconds
from slotward.adapters.webhooks.guard import Resolve, UrlGuard
from slotward.adapters.webhooks.resolver import GuardedResolver, RefusedAddress
from slotward.engine.calendars import (
    BusyRead,
    CalendarEvent,
    CalendarInvalid,
    Capabilities,
    Connection,
    ProviderSettings,
    ProviderUnreachable,
    Window,
)
from slotward.engine.errors import ValidationFailed
from slotward.engine.rules.delivery import Outcome
from slotward.engine.rules.urls import parse_target

__all__ = ["CAPABILITIES", "MAX_REDIRECTS", "IcsProvider", "ics_provider"]

MAX_REDIRECTS: Final = 5
CAPABILITIES: Final = Capabilities(
    writes=False,
    credentials=False,
    incremental=False,
    schemes=("https", "http", "file"),
    description="read-only busy time from an ICS URL (conditional GET) or a local file",
)
_READ_ONLY: Final = "the ics provider is read-only"
_REDIRECTS: Final = frozenset({301, 302, 303, 307, 308})
_CHUNK: Final = 64 * 1024
_CONNECTIONS: Final = 64
_MAX_VALIDATOR: Final = 512  # an ETag or a date; a longer one is not kept in the cursor
_FILE_HINT: Final = "set SLOTWARD_ALLOW_PRIVATE_URLS=true to allow file URLs"


def ics_provider(settings: ProviderSettings) -> IcsProvider:
    """The entry point's factory (group ``slotward.providers``, name ``ics``)."""
    return IcsProvider(settings)


@dataclass(frozen=True)
class _Cursor:
    """What a read kept: the window it expanded, and the validators of what it read."""

    window: tuple[str, str]
    etag: str | None = None
    last_modified: str | None = None
    mtime_ns: int | None = None
    size: int | None = None

    def dump(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"), sort_keys=True)

    @staticmethod
    def load(text: str | None, window: Window) -> _Cursor | None:
        """The cursor, if it was made for ``window``; None otherwise (or unreadable)."""
        if not text:
            return None
        try:
            fields = json.loads(text)
            cursor = _Cursor(
                window=(str(fields["window"][0]), str(fields["window"][1])),
                etag=_opt_str(fields.get("etag")),
                last_modified=_opt_str(fields.get("last_modified")),
                mtime_ns=_opt_int(fields.get("mtime_ns")),
                size=_opt_int(fields.get("size")),
            )
        except (ValueError, TypeError, KeyError, IndexError):
            return None
        return cursor if cursor.window == _window_key(window) else None


class IcsProvider:
    """Busy time from an ICS URL or file; it cannot write (``capabilities.writes`` is False)."""

    name = "ics"
    capabilities = CAPABILITIES

    def __init__(self, settings: ProviderSettings, *, resolve: Resolve | None = None) -> None:
        self._settings = settings
        self._guard = UrlGuard(allow_private=settings.allow_private_urls, resolve=resolve)
        self._session: aiohttp.ClientSession | None = None

    async def busy(self, conn: Connection, window: Window, cursor: str | None) -> BusyRead:
        """Everything busy in ``window`` (a full read), or unchanged since ``cursor``."""
        previous = _Cursor.load(cursor, window)
        try:
            scheme = urlsplit(conn.url).scheme.lower()
        except ValueError:
            raise ProviderUnreachable("the calendar's URL is not a URL") from None
        if scheme == "file":
            return await self._read_file(conn, window, cursor, previous)
        return await self._fetch(conn, window, cursor, previous)

    async def put_event(self, conn: Connection, event: CalendarEvent) -> Outcome:
        return Outcome(None, _READ_ONLY)

    async def delete_event(self, conn: Connection, uid: str) -> Outcome:
        return Outcome(None, _READ_ONLY)

    async def close(self) -> None:
        """Close the connection pool; a later read opens a new one."""
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()

    # -- http(s) -----------------------------------------------------------------------

    async def _fetch(
        self, conn: Connection, window: Window, cursor: str | None, previous: _Cursor | None
    ) -> BusyRead:
        headers = {"User-Agent": self._settings.user_agent, "Accept": "text/calendar, */*;q=0.1"}
        if previous is not None and previous.etag:
            headers["If-None-Match"] = previous.etag
        if previous is not None and previous.last_modified:
            headers["If-Modified-Since"] = previous.last_modified
        url = conn.url
        for _ in range(MAX_REDIRECTS + 1):
            shown = _shown(url)
            await self._check(url)
            try:
                async with self._pool().get(
                    url,
                    headers=headers,
                    allow_redirects=False,
                    timeout=aiohttp.ClientTimeout(total=self._settings.timeout),
                ) as response:
                    if response.status in _REDIRECTS:
                        url = _redirect(url, response)
                        continue
                    if response.status == 304 and previous is not None:
                        return BusyRead(full=True, unchanged=True, cursor=cursor)
                    if not 200 <= response.status < 300:
                        raise _status_error(shown, response)
                    body = await _read_capped(response)
                    etag = _validator(response.headers.get("ETag"))
                    last_modified = _validator(response.headers.get("Last-Modified"))
            except TimeoutError:
                raise ProviderUnreachable(
                    f"{shown}: timed out after {self._settings.timeout:g} s"
                ) from None
            except (aiohttp.ClientError, ssl.SSLError, OSError) as exc:
                raise ProviderUnreachable(f"{shown}: {_network_reason(exc)}") from None
            made = _Cursor(_window_key(window), etag=etag, last_modified=last_modified)
            return await self._expanded(body, window, conn, made)
        raise ProviderUnreachable(f"{_shown(conn.url)}: more than {MAX_REDIRECTS} redirects")

    async def _check(self, url: str) -> None:
        """The URL's form, and its host when it is an IP literal (aiohttp resolves no literal)."""
        try:
            target = parse_target(url)
            if _is_literal(target.host):
                await self._guard.addresses(target.host, target.port)
        except ValidationFailed as exc:
            raise ProviderUnreachable(f"{_shown(url)}: {exc.code}: {exc.detail}") from None

    def _pool(self) -> aiohttp.ClientSession:
        # Made on first use: a session belongs to the running event loop.
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(
                    limit=_CONNECTIONS, resolver=GuardedResolver(self._guard)
                ),
                trust_env=False,  # no proxy from the environment: it would bypass the guard
                cookie_jar=aiohttp.DummyCookieJar(),  # calendars share no state
            )
        return self._session

    # -- file:// -------------------------------------------------------------------------

    async def _read_file(
        self, conn: Connection, window: Window, cursor: str | None, previous: _Cursor | None
    ) -> BusyRead:
        if not self._settings.allow_private_urls:
            raise ProviderUnreachable(f"file URLs read the server's own disk; {_FILE_HINT}")
        path = _file_path(conn.url)
        known = None if previous is None else (previous.mtime_ns, previous.size)
        try:
            stamp, body = await in_parser(_read_local, path, known)
        except OSError as exc:
            raise ProviderUnreachable(f"the file cannot be read: {exc.strerror or exc}") from None
        if body is None:
            return BusyRead(full=True, unchanged=True, cursor=cursor)
        mtime_ns, size = stamp
        made = _Cursor(_window_key(window), mtime_ns=mtime_ns, size=size)
        return await self._expanded(body, window, conn, made)

    async def _expanded(
        self, body: bytes, window: Window, conn: Connection, cursor: _Cursor
    ) -> BusyRead:
        # Parsing and expanding is CPU work of up to seconds: not on the event loop.
        busy = await in_parser(read_busy, body, window, conn.timezone)
        return BusyRead(full=True, busy=tuple(busy), cursor=cursor.dump())


# -- helpers ---------------------------------------------------------------------------------


def _read_local(
    path: str, known: tuple[int | None, int | None] | None
) -> tuple[tuple[int, int], bytes | None]:
    """The file's (mtime_ns, size), and its bytes unless they are ``known`` (None then).

    Opened without blocking and read only if it is a regular file: a FIFO or a
    device would keep a calendar thread waiting for ever.
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    with open(fd, "rb") as file:
        status = os.fstat(file.fileno())
        if not stat.S_ISREG(status.st_mode):
            raise CalendarInvalid("the file URL names no regular file")
        stamp = (status.st_mtime_ns, status.st_size)
        if known == stamp:
            return stamp, None
        if status.st_size > MAX_BYTES:
            raise CalendarInvalid(f"the calendar is larger than {MAX_BYTES} bytes")
        body = file.read(MAX_BYTES + 1)  # it may have grown since fstat
    if len(body) > MAX_BYTES:
        raise CalendarInvalid(f"the calendar is larger than {MAX_BYTES} bytes")
    return stamp, body


def _file_path(url: str) -> str:
    parts = urlsplit(url)
    if parts.netloc not in ("", "localhost") or not parts.path or parts.query:
        raise ProviderUnreachable("a file URL is file:///absolute/path, on this host")
    return unquote(parts.path)


async def _read_capped(response: aiohttp.ClientResponse) -> bytes:
    """The body, or CalendarInvalid as soon as it is past the cap (the rest is never read)."""
    too_big = CalendarInvalid(f"the calendar is larger than {MAX_BYTES} bytes")
    if response.content_length is not None and response.content_length > MAX_BYTES:
        raise too_big
    chunks: list[bytes] = []
    total = 0
    while chunk := await response.content.read(_CHUNK):
        total += len(chunk)
        if total > MAX_BYTES:
            raise too_big
        chunks.append(chunk)
    return b"".join(chunks)


def _redirect(url: str, response: aiohttp.ClientResponse) -> str:
    location = response.headers.get("Location")
    if not location:
        raise ProviderUnreachable(f"{_shown(url)}: HTTP {response.status} without a Location")
    return urljoin(url, location)


def _status_error(shown: str, response: aiohttp.ClientResponse) -> ProviderUnreachable:
    status = response.status
    retry_after = None
    if status in (429, 503):
        retry_after = _retry_after(
            response.headers.get("Retry-After"), response.headers.get("Date")
        )
    return ProviderUnreachable(f"{shown}: HTTP {status}", retry_after=retry_after)


def _retry_after(value: str | None, date: str | None) -> float | None:
    """Delta seconds, or an HTTP-date less the response's own Date; None if neither."""
    try:
        now = email.utils.parsedate_to_datetime(date or "")
    except (TypeError, ValueError, IndexError):
        now = None
    return retry_after_seconds(value, now)


def _network_reason(exc: BaseException) -> str:
    if isinstance(exc, aiohttp.ClientConnectorDNSError):
        if isinstance(exc.os_error, RefusedAddress):
            return f"url_not_allowed: {exc.os_error}"
        return "the host does not resolve"
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        return "TLS certificate refused"
    if isinstance(exc, aiohttp.ClientSSLError | ssl.SSLError):
        return "TLS error"
    if isinstance(exc, aiohttp.ClientConnectorError):
        return f"connection failed: {exc.os_error.strerror or type(exc.os_error).__name__}"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "the server closed the connection without an answer"
    return type(exc).__name__


def _validator(value: str | None) -> str | None:
    """A validator to send back, or None: a server's hostile 8 KiB ETag is not stored."""
    return value if value and len(value) <= _MAX_VALIDATOR else None


def _shown(url: str) -> str:
    """``url`` as scheme://host[:port]: no userinfo, path or query (any may be a secret)."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or "?"
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        return "the calendar's URL"
    host = f"[{host}]" if ":" in host else host
    return f"{parts.scheme}://{host}{port}"[:200]


def _window_key(window: Window) -> tuple[str, str]:
    return (window.start.astimezone(UTC).isoformat(), window.end.astimezone(UTC).isoformat())


def _is_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _opt_str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _opt_int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
