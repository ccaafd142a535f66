"""The client's life cycle: closing it mid-call, using it after close, and what
its errors carry when the answer is garbage.

The servers here are bare sockets on purpose: a slotward server cannot be made
to hang or to answer a broken status line on demand.
"""

from __future__ import annotations

import asyncio
import gc
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager

import pytest

from slotward.api.client import Slotward, SyncSlotward, Unreachable

KEY = "sw_test.SECRET-never-shown-123"


@asynccontextmanager
async def _raw_server(answer: bytes | None) -> AsyncIterator[str]:
    """Reads a request head, then answers ``answer`` (None: never answers)."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            if answer is None:
                await asyncio.sleep(3600)
            writer.write(answer or b"")
            await writer.drain()
        finally:
            writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()


@contextmanager
def _silent_server_in_a_thread() -> Iterator[str]:
    ready: dict[str, str] = {}
    stop = threading.Event()

    def run() -> None:
        async def main() -> None:
            async with _raw_server(None) as url:
                ready["url"] = url
                await asyncio.to_thread(stop.wait)

        asyncio.run(main())

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while "url" not in ready and time.monotonic() < deadline:  # readiness, bounded
        time.sleep(0.01)
    try:
        yield ready["url"]
    finally:
        stop.set()
        thread.join(10)


def _slotward_client_threads() -> int:
    return sum(t.name == "slotward-client" and t.is_alive() for t in threading.enumerate())


def test_close_from_another_thread_ends_a_call_in_flight() -> None:
    """Found in review: the caller's thread waited forever."""
    with _silent_server_in_a_thread() as url:
        sw = SyncSlotward(url, KEY, timeout=60, retries=0)
        outcome: list[BaseException | object] = []

        def call() -> None:
            try:
                outcome.append(sw.get_hold("hold_1"))
            except BaseException as exc:
                outcome.append(exc)

        caller = threading.Thread(target=call, daemon=True)
        caller.start()
        deadline = time.monotonic() + 10
        while not sw._pending and time.monotonic() < deadline:  # the call is in flight
            time.sleep(0.01)
        closers = [threading.Thread(target=sw.close) for _ in range(2)]  # twice, at once
        for closer in closers:
            closer.start()
        for thread in (*closers, caller):
            thread.join(15)
            assert not thread.is_alive(), "a call or a close() never returned"
    (error,) = outcome
    assert isinstance(error, RuntimeError)
    assert "may or may not have landed" in str(error)
    with pytest.raises(RuntimeError, match="closed"):
        sw.get_hold("hold_1")


def test_a_sync_client_dropped_without_close_stops_its_thread() -> None:
    with _silent_server_in_a_thread() as url:
        before = _slotward_client_threads()
        sw = SyncSlotward(url, KEY, timeout=0.2, retries=0)
        with pytest.raises(Unreachable):
            sw.get_hold("hold_1")  # the loop's thread now runs
        assert _slotward_client_threads() == before + 1
        del sw
        gc.collect()
        deadline = time.monotonic() + 10
        while _slotward_client_threads() > before and time.monotonic() < deadline:
            time.sleep(0.02)
        assert _slotward_client_threads() == before


async def test_a_call_after_close_is_refused_rather_than_opening_a_session() -> None:
    async with _raw_server(None) as url:
        sw = Slotward(url, KEY, timeout=0.2, retries=0)
        await sw.close()
        with pytest.raises(RuntimeError, match="closed"):
            await sw.get_hold("hold_1")


async def test_a_garbage_answer_carries_no_key_in_the_error_or_its_chain() -> None:
    """Found in review: aiohttp's error, chained as the cause, held the Authorization header."""
    garbage = b"HTTP/1.1 2x0 garbage\r\n\r\n"
    async with _raw_server(garbage) as url, Slotward(url, KEY, retries=0) as sw:
        with pytest.raises(Unreachable) as caught:
            await sw.get_hold("hold_1")
    error: BaseException | None = caught.value
    while error is not None:
        for text in (str(error), repr(error), repr(vars(error))):
            assert "SECRET" not in text
        error = error.__cause__ or error.__context__
