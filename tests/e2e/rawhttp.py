"""HTTP/1.1 over a bare socket: bytes no HTTP client library would send.

The edge tests (tests/e2e/test_edges.py, test_slow_clients.py) need requests
aiohttp's and urllib's clients refuse to build (a CR inside a header, a NUL,
bytes past 0x7f) and connections they would not hold (a head trickled in, an
idle keep-alive).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

__all__ = ["BOUND", "Raw", "connect", "exchange", "parse", "request_bytes"]

# The generous bound a test waits for the server to answer or hang up: far
# above any timeout a test sets, so reaching it means the server never would.
BOUND = 15.0


@dataclass
class Raw:
    """One answer as it came off the wire."""

    status: int
    headers: dict[str, str]  # names lowercased
    body: bytes
    wire: bytes

    @property
    def json(self) -> Any:
        return json.loads(self.body)


def parse(wire: bytes) -> Raw:
    head, _, body = wire.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    return Raw(int(status_line.split()[1]), headers, body, wire)


def request_bytes(
    method: str, path: str, headers: list[tuple[bytes, bytes]], body: bytes = b""
) -> bytes:
    """A request with exactly ``headers`` (raw bytes), Host and Connection: close first."""
    lines = [f"{method} {path} HTTP/1.1".encode(), b"Host: 127.0.0.1", b"Connection: close"]
    lines += [name + b": " + value for name, value in headers]
    return b"\r\n".join(lines) + b"\r\n\r\n" + body


async def connect(base: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    url = urlsplit(base)
    assert url.hostname is not None
    assert url.port is not None
    return await asyncio.open_connection(url.hostname, url.port)


async def exchange(base: str, data: bytes) -> bytes:
    """Send ``data``, then read until the server closes (bounded): everything it said."""
    reader, writer = await connect(base)
    try:
        writer.write(data)
        await writer.drain()
        return await asyncio.wait_for(_read_all(reader), BOUND)
    finally:
        writer.close()


async def _read_all(reader: asyncio.StreamReader) -> bytes:
    chunks = []
    try:
        while chunk := await reader.read(65536):
            chunks.append(chunk)
    except ConnectionResetError:
        pass  # the server hung up with our bytes unread: what it sent still counts
    return b"".join(chunks)
