"""The async client (``slotward.api.client.Slotward``): the calls and their typed answers.

    async with Slotward("http://127.0.0.1:8080", key) as sw:
        hold = await sw.create_hold(workflow_id="wf-42", step=3,
                                    attendees=["alex@example.com"],
                                    start="2030-10-14T14:00:00Z", duration_minutes=30)
        await sw.commit_when_approved(hold.id, hold.token, timeout=600)

Every call may be sent more than once: the server derives a create's key from
its intent and replays a repeated commit or release, so the client retries a
call that got no answer, or a 429, 503 or 409 ``request_in_progress``, with the
same body (api/client/wire.py sends, api/client/retry.py says which and how
long it waits). Answers are typed (api/client/results.py); refusals raise the
error tree of api/client/errors.py, and so does a commit that waits for a
person's approval (``ApprovalPending``). docs/client.md has the whole tour;
SyncSlotward (api/client/sync.py) is the same client for code without an
event loop.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any, Literal
from urllib.parse import quote

import aiohttp

from slotward.api.client.errors import ApprovalPending, approval_pending
from slotward.api.client.results import Approval, Availability, Hold, ToolAnswer
from slotward.api.client.retry import RetryEvent, RetryPolicy
from slotward.api.client.wire import Answer, Wire
from slotward.engine.tools import FIND_FREE_SLOTS

__all__ = ["MAX_WAIT", "Slotward"]

MAX_WAIT = 60
"""The longest long poll the server holds, in seconds (``GET /v1/approvals/{id}?wait=``)."""

_PENDING = "pending"


class Slotward:
    """An async client for one slotward server and one API key.

    ``timeout`` bounds each attempt (seconds); ``retries`` is how many times a
    call is sent again (so at most ``retries + 1`` attempts); ``deadline``, if
    given, bounds a whole call, its retries and waits included. ``session`` is
    an aiohttp session of your own (kept open at the end); without one the
    client opens and closes its own. ``on_retry`` is called before each retry
    (for logs or counts); ``sleep`` and ``rng`` are how it waits and jitters,
    there for tests to skip time.
    """

    def __init__(
        self,
        url: str,
        key: str,
        *,
        timeout: float = 10.0,
        retries: int = 5,
        session: aiohttp.ClientSession | None = None,
        deadline: float | None = None,
        policy: RetryPolicy | None = None,
        on_retry: Callable[[RetryEvent], None] | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rng: random.Random | None = None,
    ) -> None:
        self._wire = Wire(
            url, key, timeout=timeout, session=session, deadline=deadline,
            policy=policy or RetryPolicy(retries=retries), on_retry=on_retry, sleep=sleep, rng=rng,
        )  # fmt: skip
        self.url = self._wire.url

    def __repr__(self) -> str:
        return f"Slotward(url={self.url!r})"

    async def __aenter__(self) -> Slotward:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Close the client's own session (a session passed in is left open).

        A call after it raises ``RuntimeError``: it would open a session nobody closes.
        """
        await self._wire.close()

    # -- the tools --------------------------------------------------------------

    async def create_hold(
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
        """Place a hold (``POST /v1/holds``); a retry or reworded repeat replays the first.

        ``fields`` are the endpoint's other body fields (``title``, ``priority``,
        ``timezone``, ``duration``, ``hold_ttl_seconds``, ``description``, ...).
        Raises :class:`SlotConflict` when the slot is taken.
        """
        body: dict[str, Any] = {"workflow_id": workflow_id, "attendees": attendees, "start": start}
        given = {"step": step, "end": end, "duration_minutes": duration_minutes}
        body.update({name: value for name, value in given.items() if value is not None})
        body.update(fields)
        return _hold(await self._wire.call("POST", "/v1/holds", body=body))

    async def commit_hold(self, hold_id: str, token: int) -> Hold:
        """Book a hold with the fencing token its placement answered.

        Raises :class:`ApprovalPending` (202) when the commit waits for a
        person's approval first (the tenant's policy, or an approval the agent
        asked for), and :class:`ApprovalRefused` (409) once that approval was
        denied or expired. :meth:`commit_when_approved` waits for the person.
        """
        path = f"/v1/holds/{_segment(hold_id)}/commit"
        status, headers, doc = await self._wire.call("POST", path, body={"token": token})
        if status == 202:
            raise approval_pending(doc, headers)
        return _hold((status, headers, doc))

    # A timeout argument, not the caller's asyncio.timeout (ASYNC109): its end is an
    # answer (the approval still pending), not a cancellation that loses it.
    async def commit_when_approved(
        self,
        hold_id: str,
        token: int,
        *,
        timeout: float,  # noqa: ASYNC109
    ) -> Hold:
        """Commit a hold, waiting up to ``timeout`` seconds for a person if it needs one.

        It commits; on :class:`ApprovalPending` it waits for the approval
        (:meth:`wait_for_approval`), then sends the same commit again, which
        commits once approved, or raises :class:`ApprovalRefused` once denied
        or expired. An approval still pending after ``timeout`` raises the
        :class:`ApprovalPending` (calling again waits again; the hold stays
        alive while its approval is pending).
        """
        try:
            return await self.commit_hold(hold_id, token)
        except ApprovalPending as pending:
            decided = await self.wait_for_approval(pending.approval.id, timeout=timeout)
            if decided.status == _PENDING:
                raise
        return await self.commit_hold(hold_id, token)

    async def release_hold(self, hold_id: str) -> Hold:
        """Give a hold up (releasing it again answers it as it is)."""
        return _hold(await self._wire.call("POST", f"/v1/holds/{_segment(hold_id)}/release"))

    async def get_hold(self, hold_id: str) -> Hold:
        """The hold as it is now."""
        return _hold(await self._wire.call("GET", f"/v1/holds/{_segment(hold_id)}"))

    async def list_holds(
        self,
        *,
        workflow_id: str | None = None,
        status: str | list[str] | None = None,
        attendee: str | None = None,
        limit: int | None = None,
    ) -> list[Hold]:
        """The caller's holds, newest first, every page of them (``GET /v1/holds``).

        An agent back from a crash can ask what its workflow holds. ``status`` is
        one of ``held``, ``committed``, ``released``, ``expired``, ``preempted``
        or a list of them; ``limit`` stops after that many holds.
        """
        query = [("workflow_id", workflow_id), ("attendee", attendee), ("status", _list(status))]
        return [Hold.parse(item) for item in await self._pages("/v1/holds", query, limit)]

    async def find_free_slots(
        self, attendees: list[str], start: str, end: str, duration_minutes: int, **fields: Any
    ) -> Availability:
        """Busy intervals, free gaps and slots between ``start`` and ``end`` (``from``, ``to``).

        ``fields`` are the other query parameters (``limit``, ``timezone``).
        """
        fields = {name: value for name, value in fields.items() if value is not None}
        if any("," in a for a in attendees):
            # The query splits every attendees value at its commas, so a display
            # name holding one ("Doe, Dana <dana@x.com>") would read as two
            # attendees; the tool envelope carries the list as JSON.
            arguments = {"attendees": attendees, "from": start, "to": end,
                         "duration_minutes": duration_minutes, **fields}  # fmt: skip
            doc = await self.call_tool(FIND_FREE_SLOTS.name, arguments)
        else:
            query = [("attendees", a) for a in attendees]
            query += [("from", start), ("to", end), ("duration_minutes", str(duration_minutes))]
            query += [(name, str(value)) for name, value in fields.items()]
            _, _, doc = await self._wire.call("GET", "/v1/availability", query=query)
        return Availability.parse(doc if isinstance(doc, dict) else {})

    async def call_tool(
        self,
        tool: str,
        arguments: dict[str, Any],
        *,
        workflow_id: str | None = None,
        step: int | None = None,
    ) -> dict[str, Any]:
        """Run a tool through ``POST /v1/tool-calls`` (the generic envelope); its document.

        What a model would be shown, refusals aside (they raise): a commit that
        waits for a person answers its ``{"outcome": "approval_required",
        "approval", "hold", ...}`` document here, where :meth:`commit_hold` raises.
        """
        answer = await self.tool_answer(tool, arguments, workflow_id=workflow_id, step=step)
        return answer.document

    async def tool_answer(
        self,
        tool: str,
        arguments: dict[str, Any],
        *,
        workflow_id: str | None = None,
        step: int | None = None,
    ) -> ToolAnswer:
        """:meth:`call_tool`, with whether the answer was a replay and its key."""
        body: dict[str, Any] = {"tool": tool, "arguments": arguments}
        if workflow_id is not None:
            body["workflow_id"] = workflow_id
        if step is not None:
            body["step"] = step
        _, headers, doc = await self._wire.call("POST", "/v1/tool-calls", body=body)
        return ToolAnswer.parse(doc, headers)

    # -- approvals (docs/approvals.md) ---------------------------------------------

    async def request_approval(
        self,
        summary: str,
        evidence: Any,
        *,
        action: dict[str, Any] | None = None,
        workflow_id: str | None = None,
        step: int | None = None,
        expires_in_seconds: int | None = None,
    ) -> Approval:
        """Ask a person to approve something (``POST /v1/approvals``).

        ``summary`` is one line for the person who decides, ``evidence`` any
        JSON value (at most 32 KiB) to decide on, ``action`` what it gates:
        ``{"type": "hold.commit", "hold_id": ...}`` gates that hold's commit;
        any other ``type`` is the agent's own business, to carry out once
        approved. It needs ``workflow_id`` unless it gates a hold's commit.
        Idempotent like every write: a retry, or the same request with its
        summary reworded, answers the first approval (``replayed``, with
        ``status_now``).
        """
        body: dict[str, Any] = {"summary": summary, "evidence": evidence}
        given = {"action": action, "workflow_id": workflow_id, "step": step,
                 "expires_in_seconds": expires_in_seconds}  # fmt: skip
        body.update({name: value for name, value in given.items() if value is not None})
        return _approval(await self._wire.call("POST", "/v1/approvals", body=body))

    async def get_approval(self, approval_id: str, *, wait: int = 0) -> Approval:
        """The approval; with ``wait`` (1 to 60 seconds) a long poll.

        The server answers as soon as the approval is no longer pending
        (decided, or expired) or once ``wait`` is over, whichever comes first.
        Each attempt may take ``wait`` seconds longer than the client's
        ``timeout`` (and the whole call as much longer than its ``deadline``).
        """
        if isinstance(wait, bool) or not isinstance(wait, int) or not 0 <= wait <= MAX_WAIT:
            raise ValueError(f"wait must be a whole number of seconds from 0 to {MAX_WAIT}")
        path = f"/v1/approvals/{_segment(approval_id, 'approval_id')}"
        query = [("wait", str(wait))] if wait else None
        return _approval(await self._wire.call("GET", path, query=query, wait=wait))

    # As commit_when_approved (ASYNC109): the time being up answers the approval as it is.
    async def wait_for_approval(
        self,
        approval_id: str,
        *,
        timeout: float,  # noqa: ASYNC109
    ) -> Approval:
        """The approval once it is no longer pending, or as it is after ``timeout`` seconds.

        Long polls of up to 60 s each, answered the moment a person decides;
        when ``timeout`` is over, the poll in flight is dropped and the
        approval read once more, so what comes back is its status then
        (``pending`` if nobody has decided yet). A ``timeout`` of 0 reads it once.
        """
        if not (math.isfinite(timeout) and timeout >= 0):
            raise ValueError("timeout must be a finite number of seconds, 0 or more")
        if timeout == 0:
            return await self.get_approval(approval_id)
        wait = min(MAX_WAIT, max(1, math.ceil(timeout)))
        try:
            async with asyncio.timeout(timeout):
                while True:
                    approval = await self.get_approval(approval_id, wait=wait)
                    if approval.status != _PENDING:
                        return approval
        except TimeoutError:
            pass  # the time is up: the last word is the read below
        return await self.get_approval(approval_id)

    async def list_approvals(
        self, *, status: str | list[str] | None = None, limit: int | None = None
    ) -> list[Approval]:
        """The tenant's approvals, oldest first, every page of them (``GET /v1/approvals``).

        ``status`` is one of ``pending``, ``approved``, ``denied``, ``expired``
        or a list of them (``status="pending"`` is a reviewer's queue);
        ``limit`` stops after that many approvals.
        """
        items = await self._pages("/v1/approvals", [("status", _list(status))], limit)
        return [Approval.parse(item) for item in items]

    async def decide_approval(
        self, approval_id: str, decision: Literal["approve", "deny"], note: str | None = None
    ) -> Approval:
        """Approve or deny (``POST /v1/approvals/{id}/decision``), with an optional ``note``.

        For a key of the ``reviewer`` or ``admin`` role, never the asking
        agent's (403 ``own_approval``). A decision is recorded once: the same
        decision again replays it (``replayed``), the other one is 409
        ``approval_decided``, one after the expiry 409 ``approval_expired``.
        """
        path = f"/v1/approvals/{_segment(approval_id, 'approval_id')}/decision"
        body = {"decision": decision, **({} if note is None else {"note": note})}
        return _approval(await self._wire.call("POST", path, body=body))

    async def _pages(
        self, path: str, query: list[tuple[str, str | None]], limit: int | None
    ) -> list[dict[str, Any]]:
        """Every item of a list's pages (``next_cursor``), up to ``limit``."""
        given = [(name, value) for name, value in query if value]
        found: list[dict[str, Any]] = []
        cursor: str | None = None
        while limit is None or len(found) < limit:
            page = given + ([("cursor", cursor)] if cursor else [])
            _, _, doc = await self._wire.call("GET", path, query=page)
            items = doc.get("items") if isinstance(doc, dict) else None
            found += [item for item in items or [] if isinstance(item, dict)]
            cursor = doc.get("next_cursor") if isinstance(doc, dict) else None
            if not isinstance(cursor, str) or not cursor:
                break
        return found if limit is None else found[:limit]


def _segment(value: str, name: str = "hold_id") -> str:
    """``value`` as one path segment: a ``/`` or ``?`` in it cannot reach another route."""
    if not isinstance(value, str) or not value:
        raise ValueError(f"{name} must be a non-empty string")
    return quote(value, safe="")


def _list(value: str | list[str] | None) -> str | None:
    """A ``status`` query value: one, or a list of them joined by commas."""
    return value if value is None or isinstance(value, str) else ",".join(value)


def _hold(answer: Answer) -> Hold:
    _, headers, doc = answer
    return Hold.parse(doc if isinstance(doc, dict) else {}, headers)


def _approval(answer: Answer) -> Approval:
    _, headers, doc = answer
    return Approval.parse(doc if isinstance(doc, dict) else {}, headers)
