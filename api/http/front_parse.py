"""The requests the front (api/http/front.py) serves itself, read from raw bytes.

The front serves a narrow, plain subset of HTTP/1.1 and hands every other
request, byte for byte, to aiohttp's parser and app. So this reader never has to
agree with aiohttp on anything unusual: it answers :data:`FOREIGN` for whatever
is not in the subset, and the request goes where it went before. In the subset:

- the request line is ``POST`` to one of :data:`ROUTES` (a hold's id of
  letters, digits, ``_``, ``~`` and ``-``), no query, ``HTTP/1.1``;
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
from http import HTTPStatus
from typing import Final, NamedTuple

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

# The request lines served, and the route label the router gives each. A hold's
# id in a path is taken only of characters no URL decoding or dot-segment
# normalization can change, so the id read here is the one the router reads.
ROUTES = ("/v1/holds", "/v1/holds/{hold_id}/commit", "/v1/holds/{hold_id}/release")
_LINE = re.compile(rb"POST /v1/holds(?:/([A-Za-z0-9_~-]{1,200})/(commit|release))? HTTP/1\.1")
_LONGEST_LINE = len(b"POST /v1/holds/%s/release HTTP/1.1" % (b"x" * 200))
_HOLD_ROUTES = {b"commit": ROUTES[1], b"release": ROUTES[2]}
_PREFIX = b"POST /v1/holds"

_NAME = rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+"  # an RFC 9110 token
_VALUE = rb"(?:[\x21-\x7e](?:[\x20-\x7e\t]*[\x21-\x7e])?)?"  # visible ASCII, inner blanks
# A head's lines, each a name and its value, in one scan: from the first byte
# that does not start such a line, the rest is taken whole by the last group
# (one match, however long the head), and makes the head foreign. So the head
# is read exactly when no match has that group: the lines it matched, one
# after another, are the head.
_FIELD = re.compile(rb"(%s):[ \t]*(%s)[ \t]*\r\n|([\s\S]+)" % (_NAME, _VALUE))
_REFUSED = frozenset({b"transfer-encoding", b"content-encoding", b"expect", b"upgrade", b"cookie"})
_CONNECTION = {b"keep-alive": False, b"close": True}


class Parsed(NamedTuple):
    """One whole request of the subset. ``headers``: by lower-case name, as sent
    (visible ASCII: :meth:`header` reads one as text). A named tuple, not a
    frozen dataclass: made once a request, for a third of the cost."""

    method: str
    route: str  # one of ROUTES
    hold_id: str | None  # the path's, on a hold's route
    headers: dict[bytes, bytes]
    body: bytes
    close: bool  # the client asked to close after the answer
    end: int  # where the request ends in the buffer

    def header(self, name: bytes) -> str | None:
        value = self.headers.get(name)
        return None if value is None else value.decode("ascii")


def parse(buf: bytes | bytearray, start: int, max_body: int) -> Parsed | str:
    """The request at ``buf[start:]``: :class:`Parsed`, :data:`INCOMPLETE` or :data:`FOREIGN`."""
    head_end = buf.find(b"\r\n\r\n", start, start + MAX_HEAD + 4)
    if head_end < 0:
        if len(buf) - start > MAX_HEAD:
            return FOREIGN
        if not _PREFIX.startswith(bytes(buf[start : start + len(_PREFIX)])):
            return FOREIGN  # not the start of one of ours
        line_end = buf.find(b"\r\n", start, start + _LONGEST_LINE + 2)
        if line_end >= 0 and _LINE.fullmatch(buf, start, line_end) is None:
            return FOREIGN  # its line is whole and not one of ours
        if line_end < 0 and len(buf) - start > _LONGEST_LINE + 1:  # the line and its CR
            return FOREIGN
        return INCOMPLETE
    line_end = buf.find(b"\r\n", start, head_end + 2)
    line = _LINE.fullmatch(buf, start, line_end)
    if line is None:
        return FOREIGN
    block = bytes(buf[line_end + 2 : head_end + 2])  # each header line with its CRLF
    found = _FIELD.findall(block)
    headers = {name.lower(): value for name, value, stray in found if not stray}
    if len(headers) != len(found) or not _REFUSED.isdisjoint(headers):
        # A stray byte (not a header line of the subset), a header named twice,
        # or one the front leaves to aiohttp.
        return FOREIGN
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
    hold_id = line[1]
    if hold_id is None:
        route, held = ROUTES[0], None
    else:
        route, held = _HOLD_ROUTES[line[2]], hold_id.decode("ascii")
    return Parsed("POST", route, held, headers, bytes(buf[body_start:end]), close, end)


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
