"""SyncSlotward: the client for scripts and notebooks, without ``await``.

It runs an async :class:`~slotward.api.client.session.Slotward` on an event loop
of its own, in a thread of its own: a notebook already runs a loop in its main
thread, where ``asyncio.run`` would refuse to start another. Errors and
results are the async client's.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from concurrent.futures import Future
from types import TracebackType
from typing import Any, TypeVar

from slotward.api.client.results import Availability, Hold
from slotward.api.client.session import Slotward

__all__ = ["SyncSlotward"]

T = TypeVar("T")


class SyncSlotward:
    """``with SyncSlotward(url, key) as sw: hold = sw.create_hold(...)``.

    Takes the arguments of :class:`Slotward` (but ``session``: a session
    belongs to one event loop, and this one is private). Calls may come from
    any thread; they run one loop, so they may overlap like async calls do.
    """

    def __init__(self, url: str, key: str, **options: Any) -> None:
        if "session" in options:
            raise TypeError("SyncSlotward opens its own session on its own event loop")
        self._client = Slotward(url, key, **options)  # validates before a loop exists
        self._loop = asyncio.new_event_loop()
        self._thread: threading.Thread | None = None
        self._starting = threading.Lock()  # two first calls from two threads start one loop

    def __repr__(self) -> str:
        return f"SyncSlotward(url={self._client.url!r})"

    def __enter__(self) -> SyncSlotward:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the session, stop the loop and its thread (calling it again does nothing)."""
        if self._loop.is_closed():
            return
        if self._thread is not None:
            self._submit(self._client.close()).result()
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join()
        self._loop.close()

    def _submit(self, coro: Coroutine[Any, Any, T]) -> Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        if self._loop.is_closed():
            coro.close()
            raise RuntimeError("this SyncSlotward is closed")
        with self._starting:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._loop.run_forever, name="slotward-client", daemon=True
                )
                self._thread.start()
        return self._submit(coro).result()

    def create_hold(
        self,
        *,
        workflow_id: str,
        step: int | None = None,
        attendees: list[str],
        start: str,
        end: str | None = None,
        duration_minutes: int | None = None,
        **fields: Any,
    ) -> Hold:
        """See :meth:`Slotward.create_hold`."""
        return self._run(
            self._client.create_hold(
                workflow_id=workflow_id, step=step, attendees=attendees, start=start, end=end,
                duration_minutes=duration_minutes, **fields,
            )
        )  # fmt: skip

    def commit_hold(self, hold_id: str, token: int) -> Hold:
        """See :meth:`Slotward.commit_hold`."""
        return self._run(self._client.commit_hold(hold_id, token))

    def release_hold(self, hold_id: str) -> Hold:
        """See :meth:`Slotward.release_hold`."""
        return self._run(self._client.release_hold(hold_id))

    def get_hold(self, hold_id: str) -> Hold:
        """See :meth:`Slotward.get_hold`."""
        return self._run(self._client.get_hold(hold_id))

    def list_holds(
        self,
        *,
        workflow_id: str | None = None,
        status: str | list[str] | None = None,
        attendee: str | None = None,
        limit: int | None = None,
    ) -> list[Hold]:
        """See :meth:`Slotward.list_holds`."""
        return self._run(
            self._client.list_holds(
                workflow_id=workflow_id, status=status, attendee=attendee, limit=limit
            )
        )

    def find_free_slots(
        self, attendees: list[str], start: str, end: str, duration_minutes: int, **fields: Any
    ) -> Availability:
        """See :meth:`Slotward.find_free_slots`."""
        return self._run(
            self._client.find_free_slots(attendees, start, end, duration_minutes, **fields)
        )

    def call_tool(
        self,
        tool: str,
        arguments: dict[str, Any],
        *,
        workflow_id: str | None = None,
        step: int | None = None,
    ) -> dict[str, Any]:
        """See :meth:`Slotward.call_tool`."""
        return self._run(
            self._client.call_tool(tool, arguments, workflow_id=workflow_id, step=step)
        )
