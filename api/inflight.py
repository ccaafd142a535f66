"""In-flight duplicates inside one server process.

A duplicate of a create that is still being written waits (a bounded time) for
the first request's answer and replays it; past the bound it gets 409
``request_in_progress`` with ``Retry-After``. Across processes the store's
serialization does the same job: the later transaction finds the record
(it waits for the first one's locks, then reads what it committed), so
nothing polls. Waiting for an execution's completion (``wait_ms``) is
api/completions.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import replace

from slotward.engine.errors import InProgress
from slotward.engine.model import Reply

__all__ = ["InFlight"]


class InFlight:
    def __init__(self, wait_seconds: float) -> None:
        self._wait = wait_seconds
        self._running: dict[tuple[str, str, Hashable], asyncio.Future[Reply]] = {}
        self.waiting = 0  # duplicates waiting right now (observable for tests)

    def __len__(self) -> int:
        return len(self._running)

    async def run(
        self,
        tenant: str,
        key: str,
        write: Callable[[], Awaitable[Reply]],
        same: Hashable,
    ) -> Reply:
        """Run ``write`` unless the same call is already running; then share its answer.

        The same call is one under ``key`` that is also ``same`` (what identifies the
        request beyond its key: the same key sent with another request is not the
        same call, and its own write refuses it). ``key`` is what a duplicate that
        waited too long is told.
        """
        slot = (tenant, key, same)
        first = self._running.get(slot)
        if first is not None:
            replayed = await self._await_first(first, key)
            if replayed is not None:
                return replayed
            return await self.run(tenant, key, write, same)  # the first failed: go ourselves
        future: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        self._running[slot] = future
        try:
            reply = await write()
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # mark it retrieved: nobody may be waiting
            raise
        else:
            future.set_result(reply)
            return reply
        finally:
            del self._running[slot]

    async def _await_first(self, first: asyncio.Future[Reply], key: str) -> Reply | None:
        self.waiting += 1
        try:
            reply = await asyncio.wait_for(asyncio.shield(first), self._wait)
        except TimeoutError:
            error = InProgress(
                "the same request is still being processed; retry shortly", retry_after=1
            )
            error.idempotency_key = key
            raise error from None
        except Exception:
            return None
        finally:
            self.waiting -= 1
        return replace(reply, replayed=True, takeover=False, preempted=0)
