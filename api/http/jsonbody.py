"""Strict decoding of JSON request bodies (I-JSON, RFC 7493).

A body is accepted only if it is a single JSON text that any other
implementation would read the same way:

- at most ``max_bytes`` long (``body_too_large``, 413);
- UTF-8 without a byte order mark (``invalid_utf8``; a leading BOM is
  ``invalid_json``, since RFC 8259 section 8.1 forbids sending one);
- valid JSON (``invalid_json``, with line and column), no string holding an
  unpaired surrogate such as ``"\\ud800"`` (``invalid_json``);
- no object with the same key twice, at any depth (``duplicate_key``);
- no ``NaN``/``Infinity``/``-Infinity`` (``non_finite_number``), no integer
  outside +-(2**53-1) and no number that overflows a double
  (``number_out_of_range``);
- nested at most ``max_depth`` arrays/objects deep (``nesting_too_deep``).

The depth is measured by a linear scan before the recursive parser runs, so a
deeply nested body is refused without touching the Python stack. Every error
is a :class:`~slotward.engine.errors.MalformedBody` or
:class:`~slotward.engine.errors.BodyTooLarge` with a stable ``code``.

Two parsers, one verdict: orjson (C, iterative, at most 1024 levels) reads a
body first; when it reads one and a walk over the value finds nothing that
needs a closer look (every integer within the I-JSON range, every float below
2**53, no deeper than ``max_depth``, as many keys in the objects as the text
names, no escaped surrogate), that value is the answer. Anything else (orjson
refusing the body, a big number, a duplicate key, deep nesting) goes to the
strict parser above, which gives the answer and the exact error, so both paths
accept the same bodies and refuse them with the same words.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
from collections.abc import Iterable, Iterator
from typing import NoReturn

import orjson
from aiohttp import StreamReader, web

from slotward.engine.errors import BodyTooLarge, MalformedBody, RequestTimeout

__all__ = [
    "BODY_SECONDS",
    "MAX_BODY_BYTES",
    "ClientClosed",
    "decode_body",
    "decode_json",
    "read_body",
    "read_json",
]


class ClientClosed(Exception):
    """The client closed its connection while its request was being read.

    Not a :class:`SlotwardError`: no answer can reach anyone. The problem
    middleware logs it as such (not as an error) and the access line and the
    metrics count it as 499, the status proxies use for "client closed request".
    """


MAX_BODY_BYTES = 64 * 1024
BODY_SECONDS = 10.0  # the whole body must arrive within this (a slow client is refused)
"""Default limit on the size of a request body, in bytes."""

# I-JSON: integers beyond this cannot be represented exactly in an IEEE 754
# double, so another implementation may read a different number.
_MAX_SAFE_INTEGER = 2**53 - 1
_MAX_SAFE_DIGITS = len(str(_MAX_SAFE_INTEGER))
_BOM = b"\xef\xbb\xbf"
# A string token (escapes included, possibly unterminated) or one bracket.
# Strings are matched whole so that brackets inside them are not counted.
_STRUCTURE = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?|[\[\]{}]', re.DOTALL)
# Strict UTF-8 decoding rules out raw surrogates, so only an escape can make
# one; bodies without such an escape skip the walk over all strings.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE = re.compile(r"[\ud800-\udfff]")
_SURROGATE_ESCAPE_BYTES = re.compile(rb"\\u[dD][89a-fA-F]")
# Every string token of a JSON text, whole, and the colon after it if it is a
# key: outside strings JSON has no quote, so scanning from the start, every
# match begins at an opening quote.
_KEY_TOKENS = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"(\s*:)?', re.DOTALL)
# A float this large may have been an integer literal too big for orjson's
# 64 bits (it reads 2**64 as a float): the strict parser decides.
_FLOAT_LIMIT = float(2**53)


def decode_json(raw: bytes, *, max_bytes: int = MAX_BODY_BYTES, max_depth: int = 32) -> object:
    """Decode ``raw`` as one strict I-JSON value and return it.

    Objects become ``dict`` (in document order), arrays ``list``, integers
    ``int`` and other numbers ``float``. ``max_depth`` counts nested arrays and
    objects: ``[]`` has depth 1, ``[[]]`` depth 2, a scalar depth 0.

    Raises:
        BodyTooLarge: ``raw`` is longer than ``max_bytes`` (``body_too_large``).
        MalformedBody: with code ``invalid_utf8``, ``invalid_json``,
            ``duplicate_key``, ``non_finite_number``, ``number_out_of_range``
            or ``nesting_too_deep``.
    """
    if len(raw) > max_bytes:
        _too_large(f"body is larger than the limit of {max_bytes} bytes", max_bytes)
    if not raw.startswith(_BOM) and not _SURROGATE_ESCAPE_BYTES.search(raw):
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError:
            pass  # the strict parser says why
        else:
            if _plain(value, raw, max_depth):
                return value
    return _strict(raw, max_depth)


def _strict(raw: bytes, max_depth: int) -> object:
    text = _decode_utf8(raw)
    _check_depth(text, max_depth)
    value = _parse(text)
    if _SURROGATE_ESCAPE.search(text):
        _reject_lone_surrogates(value)
    return value


def _plain(value: object, raw: bytes, max_depth: int) -> bool:
    """Whether orjson's ``value`` of ``raw`` is what the strict parser would accept.

    False sends the body to the strict parser (which may still accept it).
    """
    if type(value) is not dict and type(value) is not list:
        return _plain_scalar(value)
    if max_depth < 1:
        return False
    keys = 0
    stack: list[tuple[dict[str, object] | list[object], int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if type(item) is dict:
            keys += len(item)
            members: Iterable[object] = item.values()
        else:
            members = item
        for member in members:
            kind = type(member)
            if kind is dict or kind is list:
                if depth >= max_depth:
                    return False
                stack.append((member, depth + 1))  # type: ignore[arg-type]
            elif (kind is int or kind is float) and not _plain_scalar(member):
                return False
    # orjson keeps the last of two equal keys: a duplicate shows as a key the
    # text names that no object holds.
    return keys == 0 or _names_no_more_keys(raw, keys)


def _names_no_more_keys(raw: bytes, keys: int) -> bool:
    """Whether the (valid) JSON text ``raw`` names ``keys`` object keys, no more."""
    # Cheap first: where no quote is followed by white space, every key is
    # followed by its own '":', so the text names at most that many keys; a
    # '":' inside a string only makes the bound too high (then count exactly).
    spaced = b'" ' in raw or b'"\n' in raw or b'"\r' in raw or b'"\t' in raw
    if not spaced and raw.count(b'":') == keys:
        return True
    return _key_count(raw) == keys


def _plain_scalar(value: object) -> bool:
    if type(value) is int:
        return -_MAX_SAFE_INTEGER <= value <= _MAX_SAFE_INTEGER
    if type(value) is float:
        return -_FLOAT_LIMIT < value < _FLOAT_LIMIT  # False for NaN and infinities too
    return True


def _key_count(raw: bytes) -> int:
    """How many object keys the (valid) JSON text ``raw`` names, duplicates included."""
    found: list[bytes] = _KEY_TOKENS.findall(raw)
    return len(found) - found.count(b"")


async def read_json(
    request: web.Request, *, max_bytes: int = MAX_BODY_BYTES, allow_empty: bool = False
) -> object:
    """Read the body of ``request`` and decode it with :func:`decode_json`.

    A ``Content-Length`` above ``max_bytes`` is refused before anything is
    read; otherwise at most ``max_bytes + 1`` bytes are read from the stream,
    so a chunked or lying client cannot make the server buffer more (this does
    not rely on ``client_max_size``). The ``Content-Type`` is not checked:
    ``curl -d`` sends a form type and is welcome. With ``allow_empty`` an empty
    body (zero bytes) reads as ``{}``.

    A body must arrive within ``BODY_SECONDS``: a client trickling it in (or
    declaring more than it sends) does not hold a connection and a handler.

    Raises:
        BodyTooLarge: the body is longer than ``max_bytes``.
        RequestTimeout: the body took longer than ``BODY_SECONDS`` (408).
        MalformedBody: as :func:`decode_json`, or ``undecodable_body`` when
            the body does not match its ``Content-Encoding`` (a "gzip" body
            that is not gzip) or its chunked framing.
    """
    return decode_body(await read_body(request, max_bytes=max_bytes), max_bytes=max_bytes,
                       allow_empty=allow_empty)  # fmt: skip


def decode_body(
    raw: bytes, *, max_bytes: int = MAX_BODY_BYTES, allow_empty: bool = False
) -> object:
    """A body read by :func:`read_body`, decoded as :func:`read_json` decodes it."""
    if allow_empty and not raw:
        return {}
    return decode_json(raw, max_bytes=max_bytes)


async def read_body(request: web.Request, *, max_bytes: int = MAX_BODY_BYTES) -> bytes:
    """The bytes of ``request``'s body, read as :func:`read_json` reads them (its
    limits, its timeout, its errors), not decoded."""
    declared = request.content_length
    if declared is not None and declared > max_bytes:
        _too_large(f"Content-Length {declared} exceeds the limit of {max_bytes} bytes", max_bytes)
    try:
        if request.content.is_eof():
            # The whole body came with the head (a small one does): no read can
            # wait, so no timer is armed for it.
            raw = await _read_capped(request.content, max_bytes)
        else:
            async with asyncio.timeout(BODY_SECONDS):
                raw = await _read_capped(request.content, max_bytes)
    except TimeoutError:
        raise RequestTimeout(
            f"the body did not arrive within {BODY_SECONDS:g} s", code="body_timeout"
        ) from None
    except ConnectionResetError:
        # The client hung up before its body was whole: nobody is left to
        # answer, and nothing was read or written.
        raise ClientClosed from None
    except web.RequestPayloadError:
        # aiohttp's message is not passed on: it may quote the bytes it refused.
        raise MalformedBody(
            "the body could not be decoded: it does not match its Content-Encoding"
            " or its chunked Transfer-Encoding",
            code="undecodable_body",
        ) from None
    return raw


async def _read_capped(stream: StreamReader, max_bytes: int) -> bytes:
    """Read until EOF or until more than ``max_bytes`` bytes have arrived."""
    chunks: list[bytes] = []
    size = 0
    while size <= max_bytes:
        chunk = await stream.read(max_bytes + 1 - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


def _too_large(detail: str, max_bytes: int) -> NoReturn:
    raise BodyTooLarge(detail, code="body_too_large", extra={"max_bytes": max_bytes})


def _decode_utf8(raw: bytes) -> str:
    if raw.startswith(_BOM):
        raise MalformedBody(
            "body starts with a UTF-8 byte order mark; send the JSON text without one",
            code="invalid_json",
            extra={"offset": 0},
        )
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MalformedBody(
            f"body is not valid UTF-8: byte 0x{raw[exc.start]:02x} at offset {exc.start}",
            code="invalid_utf8",
            extra={"offset": exc.start},
        ) from exc


def _check_depth(text: str, max_depth: int) -> None:
    """Refuse nesting deeper than ``max_depth`` in one pass, without recursion.

    On invalid JSON the count may be off, but the parser then fails at or
    before the point where its view and this scan part ways.
    """
    depth = 0
    for match in _STRUCTURE.finditer(text):
        token = text[match.start()]
        if token in "[{":
            depth += 1
            if depth > max_depth:
                raise MalformedBody(
                    f"JSON is nested more than {max_depth} levels deep",
                    code="nesting_too_deep",
                    extra={"max_depth": max_depth},
                )
        elif token in "]}":
            depth -= 1


def _parse(text: str) -> object:
    if not text:
        raise MalformedBody(
            "body is empty; expected a JSON value at line 1, column 1",
            code="invalid_json",
            extra={"line": 1, "column": 1},
        )
    try:
        return json.loads(
            text,
            object_pairs_hook=_unique_object,
            parse_constant=_reject_constant,
            parse_int=_bounded_int,
            parse_float=_finite_float,
        )
    except json.JSONDecodeError as exc:
        raise MalformedBody(
            f"invalid JSON: {exc.msg} at line {exc.lineno}, column {exc.colno}",
            code="invalid_json",
            extra={"line": exc.lineno, "column": exc.colno},
        ) from exc


def _unique_object(pairs: list[tuple[str, object]]) -> dict[str, object]:
    obj: dict[str, object] = {}
    for key, value in pairs:
        if key in obj:
            raise MalformedBody(f"duplicate object key {json.dumps(key)}", code="duplicate_key")
        obj[key] = value
    return obj


def _reject_constant(name: str) -> NoReturn:
    raise MalformedBody(
        f"{name} is not allowed: JSON numbers must be finite", code="non_finite_number"
    )


def _bounded_int(literal: str) -> int:
    # Compare lengths first: int() of a huge literal is slow and, past 4300
    # digits, raises ValueError.
    digits = literal.removeprefix("-")
    if len(digits) <= _MAX_SAFE_DIGITS and int(digits) <= _MAX_SAFE_INTEGER:
        return int(literal)
    raise MalformedBody(
        f"integer {_abbreviate(literal)} is outside the I-JSON range +-(2**53-1)",
        code="number_out_of_range",
    )


def _finite_float(literal: str) -> float:
    number = float(literal)
    if math.isinf(number):
        raise MalformedBody(
            f"number {_abbreviate(literal)} is too large for a 64-bit float",
            code="number_out_of_range",
        )
    return number


def _abbreviate(literal: str, limit: int = 24) -> str:
    return literal if len(literal) <= limit else literal[:limit] + "..."


def _reject_lone_surrogates(value: object) -> None:
    for string in _strings(value):
        found = _SURROGATE.search(string)
        if found:
            raise MalformedBody(
                f"string contains an unpaired surrogate \\u{ord(found.group()):04x};"
                " I-JSON requires valid Unicode",
                code="invalid_json",
            )


def _strings(value: object) -> Iterator[str]:
    """Yield every string (keys included) in a decoded value, without recursion."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict):
            yield from item
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
