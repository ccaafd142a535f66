"""The Python client's approvals against a real server (docs/client.md, docs/approvals.md).

A tenant's policy sends commits of more than one attendee to a person; the
agent's commit raises ApprovalPending, ``commit_when_approved`` waits in a long
poll while a reviewer decides with their own client, and the same commit then
commits or raises ApprovalRefused. The server's clock is the test's: an
approval expires when the test moves it, never by waiting.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from slotward.api.client import ApprovalPending, ApprovalRefused, Hold, Slotward, SyncSlotward
from tests.e2e.conftest import Client, Server, until
from tests.e2e.test_client_retries import Proxy, Waits, fresh_connections
from tests.e2e.test_waiters import SIGNALLED_WITHIN

# The client is the subject; test_approvals.py runs the store on both databases.
SQLITE = pytest.mark.parametrize("database", ["sqlite"], indirect=True)

POLICY = {"require_approval": {"attendees_more_than": 1}}
BOARD: dict[str, Any] = {
    "workflow_id": "wf-board",
    "attendees": ["ceo@example.com", "cfo@example.com"],
    "start": "2030-10-14T14:00:00Z",
    "duration_minutes": 60,
    "title": "Board sync",
}
REFUND: dict[str, Any] = {
    "summary": "Refund 120 EUR to order 8812",
    "evidence": {"order": 8812, "amount": 120, "reason": "double charge"},
    "action": {"type": "refund", "order": 8812},
    "workflow_id": "wf-refunds",
    "step": 1,
}


def secret(client: Client) -> str:
    assert client.secret is not None
    return client.secret


@asynccontextmanager
async def gated(server: Server) -> AsyncIterator[tuple[Slotward, Slotward, str]]:
    """The booking agent's client, a reviewer's and the agent's key, on a tenant whose
    policy gates commits."""
    admin = await server.key(agent="ops", role="admin")
    assert (await admin.request("PUT", "/v1/approval-policy", POLICY)).status == 200
    agent = await server.key(agent="booker")
    reviewer = await server.key(agent="ana", role="reviewer")
    async with (
        Slotward(server.base, secret(agent)) as booker,
        Slotward(server.base, secret(reviewer)) as ana,
    ):
        yield booker, ana, secret(agent)


async def pending_commit(booker: Slotward, **change: Any) -> tuple[Hold, ApprovalPending]:
    hold = await booker.create_hold(**{**BOARD, **change})
    assert hold.token is not None
    with pytest.raises(ApprovalPending) as waiting:
        await booker.commit_hold(hold.id, hold.token)
    return hold, waiting.value


def polled(server: Server) -> bool:
    """A long poll waits in the server (registered with its waiters)."""
    return len(server.services.completions) == 1


async def test_a_gated_commit_waits_in_commit_when_approved_until_a_reviewer_approves(
    server: Server,
) -> None:
    async with gated(server) as (booker, ana, key):
        hold, waiting = await pending_commit(booker)
        approval = waiting.approval
        assert (waiting.status, waiting.code, waiting.retryable) == (202, "approval_required", True)
        assert (approval.status, approval.hold_id, approval.requested_by) == (
            "pending", hold.id, "booker"
        )  # fmt: skip
        assert (waiting.hold.id, waiting.hold.status) == (hold.id, "held")
        assert waiting.hold.expires_at == approval.expires_at  # the approval keeps it alive
        assert waiting.idempotency_key is not None
        seen = [str(waiting), repr(waiting), repr(waiting.problem), repr(approval)]
        assert not [line for line in seen if key in line or key.split(".")[-1] in line]
        assert [a.id for a in await ana.list_approvals(status="pending")] == [approval.id]
        assert hold.token is not None
        booking = asyncio.create_task(booker.commit_when_approved(hold.id, hold.token, timeout=60))
        await until(lambda: polled(server))
        decided = await ana.decide_approval(approval.id, "approve", "fine, the board agreed")
        assert (decided.status, decided.decided_by, decided.note) == (
            "approved", "ana", "fine, the board agreed"
        )  # fmt: skip
        assert not decided.replayed
        booked = await asyncio.wait_for(booking, SIGNALLED_WITHIN)  # the poll was of 60 s
        assert (booked.id, booked.status, booked.replayed) == (hold.id, "committed", False)
        again = await booker.commit_when_approved(hold.id, hold.token, timeout=60)
        assert (again.replayed, again.raw) == (True, booked.raw)
        same = await ana.decide_approval(approval.id, "approve")
        assert (same.replayed, same.note) == (True, "fine, the board agreed")
        assert await ana.list_approvals(status=["pending", "denied"]) == []


@SQLITE
async def test_a_denial_and_an_expiry_raise_approval_refused(server: Server) -> None:
    async with gated(server) as (booker, ana, _):
        denied, waiting = await pending_commit(booker)
        assert denied.token is not None
        booking = asyncio.create_task(
            booker.commit_when_approved(denied.id, denied.token, timeout=60)
        )
        await until(lambda: polled(server))
        await ana.decide_approval(waiting.approval.id, "deny", "not with the board")
        with pytest.raises(ApprovalRefused) as refused:
            await asyncio.wait_for(booking, SIGNALLED_WITHIN)
        assert (refused.value.status, refused.value.code) == (409, "approval_denied")
        ended = refused.value.approval
        assert (ended.id, ended.status, ended.note) == (
            waiting.approval.id, "denied", "not with the board"
        )  # fmt: skip
        with pytest.raises(ApprovalRefused):  # a person's no stays no
            await booker.commit_hold(denied.id, denied.token)
        assert (await booker.release_hold(denied.id)).status == "released"

        lapsed, _ = await pending_commit(booker, start="2030-10-15T14:00:00Z")
        assert lapsed.token is not None
        server.clock.advance(86400)  # the default expiry: nobody decided in 24 h
        with pytest.raises(ApprovalRefused) as expired:
            await booker.commit_when_approved(lapsed.id, lapsed.token, timeout=60)
        assert (expired.value.code, expired.value.approval.status) == (
            "approval_expired", "expired"
        )  # fmt: skip


@SQLITE
async def test_an_approval_asked_for_lands_once_through_a_lost_answer(server: Server) -> None:
    agent = await server.key(agent="booker")
    proxy, waits = Proxy(int(server.base.rsplit(":", 1)[1]), drop=1), Waits()
    async with (
        proxy.running() as base,
        fresh_connections() as session,
        Slotward(base, secret(agent), session=session, **waits.hooks()) as sw,
    ):
        asked = await sw.request_approval(**REFUND)
        reworded = await sw.request_approval(**{**REFUND, "summary": "Please refund 8812"})
        listed = await sw.list_approvals()
    assert [(e.status, e.reason) for e in waits.events] == [(0, "connection_error")]
    sent = [bytes(s).partition(b"\r\n\r\n")[2] for s in proxy.sent]
    assert sent[0] == sent[1]  # the retry sent the very same bytes
    assert json.loads(sent[0])["evidence"] == REFUND["evidence"]
    assert (asked.replayed, asked.status, asked.status_now) == (True, "pending", "pending")
    assert (asked.summary, asked.evidence, asked.action) == (
        REFUND["summary"], REFUND["evidence"], REFUND["action"]
    )  # fmt: skip
    assert (reworded.id, reworded.replayed, reworded.summary) == (asked.id, True, REFUND["summary"])
    assert [a.id for a in listed] == [asked.id]


@SQLITE
async def test_a_long_poll_answers_when_the_decision_lands_and_outlives_the_timeout(
    server: Server,
) -> None:
    agent = await server.key(agent="booker")
    reviewer = await server.key(agent="ana", role="reviewer")
    # Each attempt may take 1 s: a long poll's attempt may take its wait longer.
    async with (
        Slotward(server.base, secret(agent), timeout=1, retries=0) as sw,
        Slotward(server.base, secret(reviewer)) as ana,
    ):
        asked = await sw.request_approval(**REFUND)
        still = await sw.wait_for_approval(asked.id, timeout=2)
        assert (still.id, still.status) == (asked.id, "pending")  # the time was up, no error
        await until(lambda: len(server.services.completions) == 0)  # that poll has ended
        read = asyncio.create_task(sw.get_approval(asked.id, wait=60))
        await until(lambda: polled(server))
        await ana.decide_approval(asked.id, "deny", "not this order")
        answer = await asyncio.wait_for(read, SIGNALLED_WITHIN)
        assert (answer.status, answer.note, answer.decided_by) == (
            "denied",
            "not this order",
            "ana",
        )
        with pytest.raises(ValueError, match="wait"):
            await sw.get_approval(asked.id, wait=61)
    assert len(server.services.completions) == 0


@SQLITE
async def test_the_sync_client_waits_for_the_approval_too(server: Server) -> None:
    admin = await server.key(agent="ops", role="admin")
    await admin.request("PUT", "/v1/approval-policy", POLICY)
    agent, reviewer = (
        await server.key(agent="booker"),
        await server.key(agent="ana", role="reviewer"),
    )

    # The sync clients block their thread: the server runs on this one's loop.
    def ask() -> Hold:
        with SyncSlotward(server.base, secret(agent)) as sw:
            hold = sw.create_hold(**BOARD)
            assert hold.token is not None
            with pytest.raises(ApprovalPending) as waiting:
                sw.commit_hold(hold.id, hold.token)
            approval_id = waiting.value.approval.id
            assert sw.get_approval(approval_id).status == "pending"
            assert sw.wait_for_approval(approval_id, timeout=0).status == "pending"
            return hold

    def book(hold: Hold) -> Hold:
        assert hold.token is not None
        with SyncSlotward(server.base, secret(agent)) as sw:
            return sw.commit_when_approved(hold.id, hold.token, timeout=60)

    def review() -> list[str]:
        with SyncSlotward(server.base, secret(reviewer)) as ana:
            [queued] = ana.list_approvals(status="pending")
            assert ana.decide_approval(queued.id, "approve").status == "approved"
            return [a.status or "" for a in ana.list_approvals()]

    hold = await asyncio.to_thread(ask)
    booking = asyncio.create_task(asyncio.to_thread(book, hold))
    await until(lambda: polled(server))
    assert await asyncio.to_thread(review) == ["approved"]
    booked = await asyncio.wait_for(booking, SIGNALLED_WITHIN)
    assert (booked.id, booked.status) == (hold.id, "committed")
