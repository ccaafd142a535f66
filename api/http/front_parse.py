"""The requests the front (api/http/front.py) serves itself, read from raw bytes.

The front serves a narrow, plain subset of HTTP/1.1 and hands every other
request, byte for byte, to aiohttp's parser and app. So this reader never has to
agree with aiohttp on anything unusual: it answers :data:`FOREIGN` for whatever
is not in the subset, and the request goes where it went before. In the subset:

- the request line is exactly one of :data:`ROUTES` (method, path without a
  query, ``HTTP/1.1``);
- every header line is ``name: value``: the name an RFC 9110 token, the value
  visible ASCII and inner spaces or tabs, no header named twice;
- ``Content-Length`` is given, digits only, at most ``max_body`` bytes, and the
  whole body has arrived;
- ``Authorization`` is given (a dashboard session's cookie goes to aiohttp);
- no ``Transfer-Encoding``, ``Content-Encoding``, ``Expect``, ``Upgrade`` or
  ``Cookie``, and ``Connection``, if given, is ``keep-alive`` or ``close``;
- the head is at most :data:`MAX_HEAD` bytes.

:data:`INCOMPLETE` means the buffer holds the start of a request (of no known
kind yet, or of a subset request whose body is still coming).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from http import HTTPStatus
from typing import Final

__all__ = [
    "FOREIGN",
    "INCOMPLETE",
    "MAX_HEAD",
    "ROUTES",
    "Parsed",
    "answer_bytes",
    "parse",
]

MAX_HEAD = 8190  # aiohttp's own limit of a request line and of a header field
INCOMPLETE: Final = "incomplete"
FOREIGN: Final = "foreign"

# Request line -> (method, route label as the router names it).
ROUTES: dict[bytes, tuple[str, str]] = {
    b"POST /v1/holds HTTP/1.1": ("POST", "/v1/holds"),
}
_LONGEST_LINE = max(len(line) for line in ROUTES)

_HEADER = re.compile(rb"([!#$%&'*+\-.^_`|~0-9A-Za-z]+):[ \t]*((?:[\x21-\x7e][ \t]*)*)")
_REFUSED = frozenset({b"transfer-encoding", b"content-encoding", b"expect", b"upgrade", b"cookie"})
_CONNECTION = {b"keep-alive": False, b"close": True}


@dataclass(frozen=True, slots=True)
class Parsed:
    """One whole request of the subset. ``headers``: by lower-case name, as text."""

    method: str
    route: str
    headers: dict[str, str]
    body: bytes
    close: bool  # the client asked to close after the answer
    end: int  # where the request ends in the buffer


def parse(buf: bytes | bytearray, start: int, max_body: int) -> Parsed | str:
    """The request at ``buf[start:]``: :class:`Parsed`, :data:`INCOMPLETE` or :data:`FOREIGN`."""
    head_end = buf.find(b"\r\n\r\n", start, start + MAX_HEAD + 4)
    if head_end < 0:
        if len(buf) - start > MAX_HEAD:
            return FOREIGN
        line_end = buf.find(b"\r\n", start, start + _LONGEST_LINE + 2)
        if line_end >= 0 and bytes(buf[start:line_end]) not in ROUTES:
            return FOREIGN  # its line is whole and not one of ours
        if line_end < 0 and len(buf) - start > _LONGEST_LINE + 1:  # the line and its CR
            return FOREIGN
        return INCOMPLETE
    lines = bytes(buf[start:head_end]).split(b"\r\n")
    route = ROUTES.get(lines[0])
    if route is None:
        return FOREIGN
    headers: dict[bytes, bytes] = {}
    for line in lines[1:]:
        match = _HEADER.fullmatch(line)
        if match is None:
            return FOREIGN
        name = match[1].lower()
        if name in headers or name in _REFUSED:
            return FOREIGN
        headers[name] = match[2].rstrip(b" \t")
    length = headers.get(b"content-length")
    if length is None or not length.isdigit() or len(length) > 9 or b"authorization" not in headers:
        return FOREIGN
    size = int(length)
    connection = headers.get(b"connection")
    close = False
    if connection is not None:
        said = _CONNECTION.get(connection.lower())
        if said is None:
            return FOREIGN
        close = said
    if size > max_body:
        return FOREIGN  # aiohttp's path answers 413
    body_start = head_end + 4
    if len(buf) - body_start < size:
        return INCOMPLETE
    end = body_start + size
    text = {k.decode("ascii"): v.decode("ascii") for k, v in headers.items()}
    return Parsed(route[0], route[1], text, bytes(buf[body_start:end]), close, end)


_REASONS = {s.value: s.phrase.encode("ascii") for s in HTTPStatus}


def answer_bytes(
    status: int, headers: list[tuple[str, str]], body: bytes, *, date: str, server: str, close: bool
) -> bytes:
    """A whole HTTP/1.1 answer: status line, ``headers``, then Content-Length, Date,
    Server (and ``Connection: close`` when closing), then ``body``.

    ``headers`` are the service's own (never the client's), so no value holds a
    line break; each is checked anyway: a header that could split the answer is
    a fault of ours, refused loudly.
    """
    parts = [b"HTTP/1.1 %d %s\r\n" % (status, _REASONS.get(status, b"Unknown"))]
    for name, value in headers:
        if "\r" in value or "\n" in value or "\r" in name or "\n" in name:
            raise ValueError(f"header {name!r} holds a line break")
        parts.append(f"{name}: {value}\r\n".encode("latin-1"))
    tail = f"Content-Length: {len(body)}\r\nDate: {date}\r\nServer: {server}\r\n"
    if close:
        tail += "Connection: close\r\n"
    parts.append(tail.encode("ascii"))
    parts.append(b"\r\n")
    parts.append(body)
    return b"".join(parts)
