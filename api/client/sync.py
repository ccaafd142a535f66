"""SyncSlotward: the client for scripts and notebooks, without ``await``.

It runs an async :class:`~slotward.api.client.session.Slotward` on an event loop
of its own, in a thread of its own: a notebook already runs a loop in its main
thread, where ``asyncio.run`` would refuse to start another. Errors and
results are the async client's.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import weakref
from collections.abc import Coroutine
from types import TracebackType
from typing import Any, Literal, TypeVar

from slotward.api.client.results import Approval, Availability, Hold, ToolAnswer
from slotward.api.client.session import Slotward

__all__ = ["SyncSlotward"]

T = TypeVar("T")


async def _close_and_stop(client: Slotward) -> None:
    try:
        # The calls just cancelled end first (their cancellation was scheduled
        # before this coroutine), so none is destroyed pending.
        others = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
        if others:
            await asyncio.wait(others, timeout=5)
        await client.close()
    finally:
        asyncio.get_running_loop().stop()


def _serve(loop: asyncio.AbstractEventLoop) -> None:
    """The loop's thread: it runs until stopped, then closes the loop it ran."""
    try:
        loop.run_forever()
    finally:
        loop.close()


def _abandon(loop: asyncio.AbstractEventLoop, client: Slotward) -> None:
    """A client dropped without close(): its session closed, its loop stopped."""
    if not loop.is_closed() and loop.is_running():
        asyncio.run_coroutine_threadsafe(_close_and_stop(client), loop)


class SyncSlotward:
    """``with SyncSlotward(url, key) as sw: hold = sw.create_hold(...)``.

    Takes the arguments of :class:`Slotward` (but ``session``: a session
    belongs to one event loop, and this one is private). Calls may come from
    any thread; they run one loop, so they may overlap like async calls do.
    :meth:`close` cancels the calls still in flight (each raises
    ``RuntimeError``: closed before its answer came, so it may or may not have
    landed; sent again by a new client, it lands once). One dropped without
    ``close()`` is closed when it is collected.
    """

    def __init__(self, url: str, key: str, **options: Any) -> None:
        if "session" in options:
            raise TypeError("SyncSlotward opens its own session on its own event loop")
        self._client = Slotward(url, key, **options)  # validates before a loop exists
        self._loop = asyncio.new_event_loop()
        self._thread: threading.Thread | None = None
        # Guards the thread's start, the pending calls and the closing: two
        # first calls from two threads start one loop; a call never starts on
        # a loop being closed.
        self._lock = threading.Lock()
        self._pending: set[concurrent.futures.Future[Any]] = set()
        self._closing = False
        self._closed = threading.Event()
        self._finalizer = weakref.finalize(self, _abandon, self._loop, self._client)

    def __repr__(self) -> str:
        return f"SyncSlotward(url={self._client.url!r})"

    def __enter__(self) -> SyncSlotward:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Cancel the calls in flight, close the session, stop the loop and its thread.

        Calling it again, from any thread, waits for the first close to end and
        does nothing more.
        """
        with self._lock:
            first = not self._closing
            self._closing = True
            pending, thread = list(self._pending), self._thread
        if not first:
            self._closed.wait()
            return
        try:
            self._finalizer.detach()
            for future in pending:
                future.cancel()
            if thread is not None:
                asyncio.run_coroutine_threadsafe(_close_and_stop(self._client), self._loop)
                thread.join()  # the thread closes the loop it ran
            else:
                self._loop.close()
        finally:
            self._closed.set()

    def _run(self, coro: Coroutine[Any, Any, T]) -> T:
        with self._lock:
            if self._closing:
                coro.close()
                raise RuntimeError("this SyncSlotward is closed")
            if self._thread is None:
                self._thread = threading.Thread(
                    target=_serve, args=(self._loop,), name="slotward-client", daemon=True
                )
                self._thread.start()
            future = asyncio.run_coroutine_threadsafe(coro, self._loop)
            self._pending.add(future)
        try:
            return future.result()
        except concurrent.futures.CancelledError:
            raise RuntimeError(
                "this SyncSlotward was closed before the call's answer came: it may or may "
                "not have landed (sent again, it lands once)"
            ) from None
        finally:
            with self._lock:
                self._pending.discard(future)

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

    def commit_when_approved(self, hold_id: str, token: int, *, timeout: float) -> Hold:
        """See :meth:`Slotward.commit_when_approved`."""
        return self._run(self._client.commit_when_approved(hold_id, token, timeout=timeout))

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

    def tool_answer(
        self,
        tool: str,
        arguments: dict[str, Any],
        *,
        workflow_id: str | None = None,
        step: int | None = None,
    ) -> ToolAnswer:
        """See :meth:`Slotward.tool_answer`."""
        return self._run(
            self._client.tool_answer(tool, arguments, workflow_id=workflow_id, step=step)
        )

    def request_approval(
        self,
        summary: str,
        evidence: Any,
        *,
        action: dict[str, Any] | None = None,
        workflow_id: str | None = None,
        step: int | None = None,
        expires_in_seconds: int | None = None,
    ) -> Approval:
        """See :meth:`Slotward.request_approval`."""
        return self._run(
            self._client.request_approval(
                summary, evidence, action=action, workflow_id=workflow_id, step=step,
                expires_in_seconds=expires_in_seconds,
            )
        )  # fmt: skip

    def get_approval(self, approval_id: str, *, wait: int = 0) -> Approval:
        """See :meth:`Slotward.get_approval`."""
        return self._run(self._client.get_approval(approval_id, wait=wait))

    def wait_for_approval(self, approval_id: str, *, timeout: float) -> Approval:
        """See :meth:`Slotward.wait_for_approval`."""
        return self._run(self._client.wait_for_approval(approval_id, timeout=timeout))

    def list_approvals(
        self, *, status: str | list[str] | None = None, limit: int | None = None
    ) -> list[Approval]:
        """See :meth:`Slotward.list_approvals`."""
        return self._run(self._client.list_approvals(status=status, limit=limit))

    def decide_approval(
        self, approval_id: str, decision: Literal["approve", "deny"], note: str | None = None
    ) -> Approval:
        """See :meth:`Slotward.decide_approval`."""
        return self._run(self._client.decide_approval(approval_id, decision, note))
