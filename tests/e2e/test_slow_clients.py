"""Slow clients cannot hold connections, and a process holds a bounded number.

A client trickling one header line a second once kept its connection open for
as long as it liked (aiohttp closes an incomplete head only at its keep-alive
deadline, an hour by default), and 500 such connections were held. The
timeouts here are set small through Config; the waits are bounded by
``rawhttp.BOUND``, far above them, and assert only that the server hangs up.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import resource
import socket
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from slotward.api.http.fdlimit import RESERVED_FILES
from tests.e2e.conftest import HOLD_BODY, Server
from tests.e2e.rawhttp import BOUND, connect, exchange, parse
from tests.e2e.served import slotward_serve

HEALTHZ = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
SHORT_HEAD = {"head_timeout_seconds": 0.5, "keepalive_seconds": 60.0}


async def _hung_up(reader: asyncio.StreamReader) -> bytes:
    """What the server sent before it closed the connection (bounded wait)."""
    chunks = []
    with contextlib.suppress(ConnectionResetError):
        while chunk := await asyncio.wait_for(reader.read(65536), BOUND):
            chunks.append(chunk)
    return b"".join(chunks)


async def _trickle(writer: asyncio.StreamWriter, start: bytes) -> None:
    """Send ``start``, then one header line every 0.1 s, until the server hangs up."""
    writer.write(start)
    with contextlib.suppress(ConnectionError):
        for n in range(int(BOUND * 10)):
            await asyncio.sleep(0.1)
            writer.write(b"X-Slow-%d: y\r\n" % n)
            await writer.drain()


@contextlib.asynccontextmanager
async def _trickling(base: str, count: int) -> AsyncIterator[list[asyncio.StreamReader]]:
    opened = [await connect(base) for _ in range(count)]
    tasks = [asyncio.create_task(_trickle(w, b"GET /healthz HTTP/1.1\r\n")) for _, w in opened]
    try:
        yield [r for r, _ in opened]
    finally:
        for task in tasks:
            task.cancel()
        for _, writer in opened:
            writer.close()


async def _read_answer(reader: asyncio.StreamReader) -> bytes:
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), BOUND)
    length = int(parse(head).headers["content-length"])
    return head + await asyncio.wait_for(reader.readexactly(length), BOUND)


@pytest.mark.parametrize("config_overrides", [SHORT_HEAD])
async def test_a_trickled_head_is_cut_off_while_others_are_served(
    server: Server, log_stream: io.StringIO
) -> None:
    client = await server.key()
    async with _trickling(server.base, 5) as slow:
        made = await client.create(dict(HOLD_BODY))  # served beside them
        assert made.status == 201
        cut = await asyncio.gather(*(_hung_up(r) for r in slow))
    assert cut == [b""] * 5  # closed, unanswered
    assert (await client.get("/healthz")).status == 200
    assert log_stream.getvalue().count("request head took longer than 0.5 s") == 5


@pytest.mark.parametrize("config_overrides", [SHORT_HEAD])
async def test_a_connection_that_sends_nothing_is_closed(server: Server) -> None:
    reader, writer = await connect(server.base)
    try:
        assert await _hung_up(reader) == b""
    finally:
        writer.close()


@pytest.mark.parametrize("config_overrides", [SHORT_HEAD])
async def test_the_next_head_on_a_kept_alive_connection_has_the_same_bound(
    server: Server,
) -> None:
    reader, writer = await connect(server.base)
    try:
        writer.write(HEALTHZ)
        assert parse(await _read_answer(reader)).status == 200
        trickle = asyncio.create_task(_trickle(writer, b"GET /healthz HTTP/1.1\r\n"))
        assert await _hung_up(reader) == b""  # well before the 60 s keep-alive
        trickle.cancel()
    finally:
        writer.close()


@pytest.mark.parametrize("config_overrides", [{"keepalive_seconds": 0.5}])
async def test_an_idle_kept_alive_connection_is_closed(server: Server) -> None:
    reader, writer = await connect(server.base)
    try:
        for _ in range(2):  # kept alive between answers
            writer.write(HEALTHZ)
            assert parse(await _read_answer(reader)).status == 200
        assert await _hung_up(reader) == b""
    finally:
        writer.close()


@pytest.mark.parametrize("config_overrides", [{"max_connections": 4}])
async def test_past_the_connection_cap_a_new_connection_gets_a_503_and_is_closed(
    server: Server, log_stream: io.StringIO
) -> None:
    held = [await connect(server.base) for _ in range(4)]
    try:
        for reader, writer in held:  # each served, then idle in keep-alive
            writer.write(HEALTHZ)
            assert parse(await _read_answer(reader)).status == 200
        refused = parse(await exchange(server.base, HEALTHZ))
        assert (refused.status, refused.headers["content-type"]) == (
            503, "application/problem+json",
        )  # fmt: skip
        assert (refused.json["code"], refused.json["retryable"]) == ("too_many_connections", True)
        assert refused.headers["retry-after"] == "1"
        assert refused.headers["connection"] == "close"
        assert refused.headers["server"] == "slotward"
        for _ in range(30):  # a flood past the cap: refused, and not a log line each
            assert parse(await exchange(server.base, HEALTHZ)).status == 503
        reader, writer = held.pop()
        writer.write(HEALTHZ)  # the held ones are still served
        assert parse(await _read_answer(reader)).status == 200
        writer.close()
        assert await _served_again(server.base)  # once one of them has gone
    finally:
        for _, writer in held:
            writer.close()
    lines = [line for line in log_stream.getvalue().splitlines() if "refused" in line]
    assert '"max_connections":4' in lines[0]
    assert len(lines) <= 8  # 31 refusals: a line, then a count per second (was a line each)


async def _served_again(base: str) -> bool:
    """Whether a new connection is served once the server has seen one close (bounded)."""
    for _ in range(int(BOUND * 20)):
        if (
            parse(
                await exchange(base, HEALTHZ.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n"))
            ).status
            == 200
        ):
            return True
        await asyncio.sleep(0.05)
    return False


FILE_LIMIT = 384  # a cap of 128 is left, and 600 clients flood past it


def _low_file_limit() -> None:  # in the child, before exec
    resource.setrlimit(resource.RLIMIT_NOFILE, (FILE_LIMIT, FILE_LIMIT))


def test_under_a_low_open_files_limit_the_cap_fits_and_slow_clients_get_503s(
    tmp_path: Path,
) -> None:
    """With 384 descriptors and the default cap of 1024, trickling clients exhausted
    the descriptors: accept() failed with a traceback each time (13,547 lines in one
    probe) and normal clients timed out. Now the cap is fitted to the limit, the rest
    are refused, and a moment without descriptors during the flood (refused
    connections are accepted first) is a warning a second, not a traceback each."""
    env = {"SLOTWARD_LOG_FORMAT": "json"}
    held: list[socket.socket] = []
    with slotward_serve(tmp_path, env, preexec_fn=_low_file_limit) as served:
        try:
            for _ in range(600):  # each sends half a request line and waits
                sock = socket.create_connection(("127.0.0.1", served.port), timeout=BOUND)
                sock.sendall(b"GET /hea")
                held.append(sock)
            with socket.create_connection(("127.0.0.1", served.port), timeout=BOUND) as late:
                # Read before sending: the refusal is written at once, and bytes of ours
                # left unread when the server closes would make it reset the connection.
                answer = b""
                while chunk := late.recv(65536):
                    answer += chunk
            refused = parse(answer)
            assert (refused.status, refused.json["code"]) == (503, "too_many_connections")
        finally:
            for sock in held:
                sock.close()
    text = served.log()
    assert f'"open_files_limit":{FILE_LIMIT}' in text
    assert f'"max_connections":{FILE_LIMIT - RESERVED_FILES}' in text
    assert "Traceback" not in text
    assert '"level":"ERROR"' not in text
    assert text.count("out of file descriptors") <= 2 * BOUND  # a line a second at most


async def test_a_trickled_body_is_refused_with_408_and_a_whole_one_is_served(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A body that came whole with its head is read without a timer
    (api/http/jsonbody.py); one that has not must still arrive in time."""
    monkeypatch.setattr("slotward.api.http.jsonbody.BODY_SECONDS", 0.5)
    client = await server.key()
    body = b'{"workflow_id":"wf-trickle"}'
    head = (
        b"POST /v1/holds HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
        + (client.secret or "").encode()
        + b"\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
    )
    reader, writer = await connect(server.base)
    try:
        writer.write(head + body[:5])  # the rest never comes
        answer = parse(await _read_answer(reader))
        assert (answer.status, answer.json["code"]) == (408, "body_timeout")
    finally:
        writer.close()
    closing = head.replace(b"Host: x\r\n", b"Host: x\r\nConnection: close\r\n")
    whole = parse(await exchange(server.base, closing + body))
    assert whole.json["code"] != "body_timeout"  # read at once (422: the body lacks fields)


async def _hang_up_mid_body(base: str, secret: str) -> None:
    head = (
        b"POST /v1/holds HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
        + secret.encode()
        + b"\r\nContent-Type: application/json\r\nContent-Length: 200\r\n\r\n"
    )
    _, writer = await connect(base)
    writer.write(head + b'{"workflow_id":')  # 15 of the 200 bytes, then gone
    await writer.drain()
    writer.transport.abort()  # a reset, as a client that timed out or crashed


def test_a_client_that_hangs_up_mid_body_is_no_server_error(tmp_path: Path) -> None:
    """Found by the chaos harness: a cut connection logged a traceback and counted a 500."""
    with slotward_serve(tmp_path, {}, demo_key=True) as served:
        assert served.secret is not None
        for _ in range(3):
            asyncio.run(_hang_up_mid_body(served.base, served.secret))
        metrics = ""
        for _ in range(100):  # the server notices each reset on its own time
            metrics = parse(asyncio.run(_get(served.base, "/metrics"))).body.decode()
            closed = served.log().count("client closed the connection")
            if closed == 3 and 'route="/v1/holds",status="499"} 3.0' in metrics:
                break
            asyncio.run(asyncio.sleep(0.1))
    log = served.log()
    assert "unhandled error" not in log
    assert "Traceback" not in log
    assert log.count("client closed the connection during POST /v1/holds") == 3
    assert 'route="/v1/holds",status="499"} 3.0' in metrics
    assert 'status="500"' not in metrics


async def _get(base: str, path: str) -> bytes:
    return await exchange(
        base, f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode()
    )
