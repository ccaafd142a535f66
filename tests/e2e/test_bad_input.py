"""DESIGN section 7: bad input never gets a 500, and nothing is written for it.

Every case below goes over real HTTP to the real app on a real SQLite file and
must answer a 4xx ``application/problem+json`` with a stable ``code``, a
non-empty ``detail`` and ``retryable: false``, while every table of the
database keeps exactly the rows it had before the call.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tests.e2e.conftest import HOLD_BODY, Answer, Client, Server

BASE = HOLD_BODY
DROP = object()  # a marker: leave this member out of the body


def body(**changes: Any) -> bytes:
    """``BASE`` with members replaced (or dropped with ``DROP``), as JSON bytes."""
    doc = {**BASE, **changes}
    return json.dumps({k: v for k, v in doc.items() if v is not DROP}).encode()


def splice(raw_member: str) -> bytes:
    """``BASE`` with one more member spliced in verbatim (for non-JSON-able text)."""
    return json.dumps(BASE)[:-1].encode() + b", " + raw_member.encode() + b"}"


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


def snapshot(server: Server) -> dict[str, int]:
    """Row counts of every table of the database (more than ``server.counts()``)."""
    counts = server.table_counts()
    for table in ("holds", "ledger", "audit_log", "outbox", "hold_attendees", "attendees"):
        assert table in counts
    return counts


def assert_problem(answer: Answer, status: int, code: str, field: str | None = None) -> None:
    assert answer.status == status, answer.body[:500]
    assert answer.headers["Content-Type"].startswith("application/problem+json")
    problem = answer.json
    assert problem["code"] == code, problem
    assert problem["status"] == status
    assert isinstance(problem["title"], str)
    assert problem["title"]
    assert isinstance(problem["detail"], str)
    assert problem["detail"].strip()
    assert problem["retryable"] is False
    if field is not None:
        assert problem.get("field") == field, problem


@pytest.fixture
async def agent(server: Server) -> Client:
    return await server.key(priority=50)


MANY = [f"person{i}@example.com" for i in range(101)]

# (raw body, extra headers, status, code, field)
CREATE_CASES = [
    # -- the bytes on the wire --------------------------------------------------
    pytest.param(
        body(title="x" * (65 * 1024)), None, 413, "body_too_large", None, id="body-over-64KiB"
    ),
    pytest.param(b'{"workflow_id": "wf-42",', None, 400, "invalid_json", None, id="truncated-json"),
    pytest.param(b"{'workflow_id': 'wf-42'}", None, 400, "invalid_json", None, id="single-quotes"),
    pytest.param(b"", None, 400, "invalid_json", None, id="empty-body"),
    pytest.param(body()[:-1] + b",}", None, 400, "invalid_json", None, id="trailing-comma"),
    pytest.param(
        b"\xef\xbb\xbf" + body(), None, 400, "invalid_json", None, id="utf8-byte-order-mark"
    ),
    pytest.param(
        body(title="caf\u00e9").replace(b"caf\\u00e9", b"caf\xe9"),
        None, 400, "invalid_utf8", None, id="latin-1-byte",
    ),
    pytest.param(
        body().replace(b"Strategy", b"Strat\xc3\x28gy"),
        None, 400, "invalid_utf8", None, id="broken-utf8-sequence",
    ),
    pytest.param(
        splice('"description": "\\ud800 lone surrogate"'),
        None, 400, "invalid_json", None, id="lone-surrogate",
    ),
    pytest.param(splice('"title": "again"'), None, 400, "duplicate_key", None, id="duplicate-key"),
    pytest.param(
        body(attendees=[{"a": 1}]).replace(b'{"a": 1}', b'{"a": 1, "a": 2}'),
        None, 400, "duplicate_key", None, id="duplicate-key-nested",
    ),
    pytest.param(splice('"priority": NaN'), None, 400, "non_finite_number", None, id="NaN"),
    pytest.param(splice('"priority": Infinity'), None, 400, "non_finite_number", None, id="Inf"),
    pytest.param(splice('"priority": -Infinity'), None, 400, "non_finite_number", None, id="-Inf"),
    pytest.param(
        body(priority=2**53), None, 400, "number_out_of_range", None, id="integer-2**53"
    ),
    pytest.param(
        body(priority=-(2**53)), None, 400, "number_out_of_range", None, id="integer--2**53"
    ),
    pytest.param(
        splice('"hold_ttl_seconds": 1e400'),
        None, 400, "number_out_of_range", None, id="float-1e400",
    ),
    pytest.param(
        splice(f'"description": {nested(40)}'),
        None, 400, "nesting_too_deep", None, id="deep-nesting",
    ),
    pytest.param(
        splice(f'"description": {nested(100_000)[:30_000]}'),
        None, 400, "nesting_too_deep", None, id="deep-unterminated-nesting",
    ),
    # -- the shape of the document ---------------------------------------------
    pytest.param(b"[" + body() + b"]", None, 422, "invalid_body", None, id="array-body"),
    pytest.param(b'"a string"', None, 422, "invalid_body", None, id="string-body"),
    pytest.param(b"null", None, 422, "invalid_body", None, id="null-body"),
    pytest.param(body(titel="typo"), None, 422, "unknown_field", "titel", id="unknown-field"),
    pytest.param(
        body(Workflow_id="wf-42"), None, 422, "unknown_field", "Workflow_id", id="unknown-case"
    ),
    pytest.param(
        body(workflow_id=DROP), None, 422, "missing_field", "workflow_id", id="no-workflow"
    ),
    pytest.param(
        body(attendees=DROP), None, 422, "missing_field", "attendees", id="no-attendees"
    ),
    pytest.param(body(start=DROP), None, 422, "missing_field", "start", id="no-start"),
    pytest.param(
        body(workflow_id=""), None, 422, "invalid_field", "workflow_id", id="empty-workflow"
    ),
    pytest.param(
        body(workflow_id="w" * 256), None, 422, "invalid_field", "workflow_id", id="long-workflow"
    ),
    pytest.param(body(title=None), None, 422, "invalid_field", "title", id="null-title"),
    pytest.param(body(title=7), None, 422, "invalid_field", "title", id="number-title"),
    # -- attendees ----------------------------------------------------------------
    pytest.param(body(attendees=MANY), None, 422, "invalid_field", "attendees", id="101-attendees"),
    pytest.param(body(attendees=[]), None, 422, "invalid_field", "attendees", id="0-attendees"),
    pytest.param(
        body(attendees="alex@example.com"),
        None, 422, "invalid_field", "attendees", id="attendees-not-a-list",
    ),
    pytest.param(
        body(attendees=[42]), None, 422, "invalid_field", "attendees[0]", id="attendee-number"
    ),
    pytest.param(
        body(attendees=[""]), None, 422, "invalid_field", "attendees[0]", id="attendee-empty"
    ),
    pytest.param(
        body(attendees=["alex@"]), None, 422, "invalid_attendee", "attendees", id="email-no-domain"
    ),
    pytest.param(
        body(attendees=["alex@@example.com"]),
        None, 422, "invalid_attendee", "attendees", id="email-two-ats",
    ),
    pytest.param(
        body(attendees=["alex smith@example.com"]),
        None, 422, "invalid_attendee", "attendees", id="email-with-space",
    ),
    pytest.param(
        body(attendees=["Alex <alex@localhost>"]),
        None, 422, "invalid_attendee", "attendees", id="named-email-no-dot",
    ),
    pytest.param(
        body(attendees=["ok@example.com", "not an id"]),
        None, 422, "invalid_attendee", "attendees", id="bad-attendee-id",
    ),
    # -- time -------------------------------------------------------------------
    pytest.param(
        body(duration_minutes=DROP, end="2030-10-14T14:00:00Z"),
        None, 422, "invalid_interval", "end", id="end-equals-start",
    ),
    pytest.param(
        body(duration_minutes=DROP, end="2030-10-14T13:00:00Z"),
        None, 422, "invalid_interval", "end", id="end-before-start",
    ),
    pytest.param(
        body(duration_minutes=DROP, end="2030-10-15T14:00:01Z"),
        None, 422, "hold_too_long", "end", id="longer-than-24h",
    ),
    pytest.param(
        body(duration_minutes=DROP, duration="PT25H"),
        None, 422, "hold_too_long", "end", id="duration-longer-than-24h",
    ),
    pytest.param(
        body(duration_minutes=1441), None, 422, "invalid_field", "duration_minutes", id="1441-min"
    ),
    pytest.param(
        body(duration_minutes=0), None, 422, "invalid_field", "duration_minutes", id="0-minutes"
    ),
    pytest.param(
        body(start="2030-10-01T08:59:59Z"), None, 422, "start_in_past", "start", id="start-in-past"
    ),
    pytest.param(
        body(start="2029-10-14T14:00:00Z"), None, 422, "start_in_past", "start", id="last-year"
    ),
    pytest.param(
        body(end="2030-10-14T14:30:00Z"),
        None, 422, "end_conflict", "end", id="end-and-duration_minutes",
    ),
    pytest.param(
        body(duration="PT30M"), None, 422, "end_conflict", "end", id="duration-and-minutes"
    ),
    pytest.param(
        body(duration_minutes=DROP), None, 422, "end_required", "end", id="no-end-no-duration"
    ),
    pytest.param(
        body(start="2030-10-14T14:00:00", timezone="Mars/Olympus_Mons"),
        None, 422, "unknown_timezone", "timezone", id="unknown-timezone",
    ),
    pytest.param(
        body(start="2030-10-14T14:00:00", timezone="Europe"),
        None, 422, "unknown_timezone", "timezone", id="timezone-directory",
    ),
    pytest.param(
        body(start="2030-10-14T14:00:00", timezone="localtime"),
        None, 422, "unknown_timezone", "timezone", id="timezone-host-dependent",
    ),
    pytest.param(
        body(timezone="Not/AZone"),
        None, 422, "unknown_timezone", "timezone", id="unknown-timezone-with-offset-start",
    ),
    pytest.param(
        body(start="2030-10-14"), None, 422, "invalid_datetime", "start", id="bare-date"
    ),
    pytest.param(
        body(start="next tuesday"), None, 422, "invalid_datetime", "start", id="prose-start"
    ),
    pytest.param(
        body(start="2030-02-30T14:00:00Z"), None, 422, "invalid_datetime", "start", id="feb-30"
    ),
    pytest.param(
        body(duration_minutes=DROP, duration="P1D"),
        None, 422, "invalid_duration", "duration", id="duration-in-days",
    ),
    pytest.param(
        body(duration_minutes=DROP, duration="30 minutes"),
        None, 422, "invalid_duration", "duration", id="duration-prose",
    ),
    pytest.param(
        body(duration_minutes=DROP, duration="PT"),
        None, 422, "invalid_duration", "duration", id="duration-empty-PT",
    ),
    pytest.param(
        body(duration_minutes=DROP, duration="PT-30M"),
        None, 422, "invalid_duration", "duration", id="duration-negative",
    ),
    # -- the envelope and descriptive fields ------------------------------------
    pytest.param(body(step="3"), None, 422, "invalid_step", "step", id="step-string"),
    pytest.param(body(step=-1), None, 422, "invalid_step", "step", id="step-negative"),
    pytest.param(body(step=3.0), None, 422, "invalid_step", "step", id="step-float"),
    pytest.param(body(step=True), None, 422, "invalid_step", "step", id="step-bool"),
    pytest.param(
        body(priority=51), None, 422, "priority_too_high", "priority", id="priority-above-agent"
    ),
    pytest.param(body(priority=101), None, 422, "invalid_field", "priority", id="priority-101"),
    pytest.param(body(priority=-1), None, 422, "invalid_field", "priority", id="priority-negative"),
    pytest.param(
        body(hold_ttl_seconds=9), None, 422, "invalid_field", "hold_ttl_seconds", id="ttl-9"
    ),
    pytest.param(
        body(hold_ttl_seconds=3601), None, 422, "invalid_field", "hold_ttl_seconds", id="ttl-3601"
    ),
    pytest.param(
        body(hold_ttl_seconds=60.5),
        None, 422, "invalid_field", "hold_ttl_seconds", id="ttl-fraction",
    ),
    # -- headers ----------------------------------------------------------------
    pytest.param(
        body(), {"Idempotency-Key": ""},
        422, "invalid_idempotency_key", "Idempotency-Key", id="idempotency-key-empty",
    ),
    pytest.param(
        body(), {"Idempotency-Key": "cl\u00e9-1234"},
        422, "invalid_idempotency_key", "Idempotency-Key", id="idempotency-key-non-ascii",
    ),
    pytest.param(
        body(), {"Idempotency-Key": "k" * 256},
        422, "invalid_idempotency_key", "Idempotency-Key", id="idempotency-key-256-chars",
    ),
    pytest.param(
        body(), {"Idempotency-Key": "tab\there"},
        422, "invalid_idempotency_key", "Idempotency-Key", id="idempotency-key-control-char",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("raw", "headers", "status", "code", "field"), CREATE_CASES)
async def test_bad_create_is_refused_and_nothing_is_written(
    server: Server,
    agent: Client,
    raw: bytes,
    headers: dict[str, str] | None,
    status: int,
    code: str,
    field: str | None,
) -> None:
    before = snapshot(server)
    answer = await agent.post("/v1/holds", raw=raw, headers=headers)
    assert_problem(answer, status, code, field)
    assert snapshot(server) == before
    assert server.counts()["ledger"] == 0
    assert server.counts()["audit_log"] == 0


async def test_the_same_call_without_the_mistake_is_then_placed_fresh(
    server: Server, agent: Client
) -> None:
    """A refused call leaves no trace: the corrected call is not a replay of it."""
    refused = await agent.post("/v1/holds", raw=body(priority=99))
    assert refused.status == 422
    bad_key = await agent.post("/v1/holds", raw=body(), headers={"Idempotency-Key": "k" * 256})
    assert bad_key.status == 422
    placed = await agent.post("/v1/holds", raw=body())
    assert placed.status == 201, placed.json
    assert placed.headers["Idempotent-Replayed"] == "false"
    assert server.counts()["holds"] == 1
    assert server.counts()["ledger"] == 1


async def test_a_body_over_64KiB_without_content_length_is_refused(
    server: Server, agent: Client
) -> None:
    """A chunked body cannot slip past the limit by not declaring its size."""
    payload = body(description="y" * (70 * 1024))

    async def chunks() -> AsyncIterator[bytes]:
        for i in range(0, len(payload), 8192):
            yield payload[i : i + 8192]

    before = snapshot(server)
    async with server.session.post(
        server.base + "/v1/holds",
        data=chunks(),
        headers={"Authorization": f"Bearer {agent.secret}"},
    ) as resp:
        answer = Answer(resp.status, dict(resp.headers), await resp.read())
    assert_problem(answer, 413, "body_too_large")
    assert snapshot(server) == before


async def test_a_body_of_exactly_64KiB_is_read(server: Server, agent: Client) -> None:
    """The limit is the limit: a valid body just under it is decoded and validated."""
    filler = body(description="")
    padded = body(description="z" * (64 * 1024 - len(filler)))
    assert len(padded) == 64 * 1024
    answer = await agent.post("/v1/holds", raw=padded)
    # decoded fine, then refused by the shape (description is at most 5000 characters)
    assert_problem(answer, 422, "invalid_field", "description")


# -- commit, release, tool calls, the directory ---------------------------------


@pytest.fixture
async def placed(server: Server, agent: Client) -> dict[str, Any]:
    answer = await agent.post("/v1/holds", raw=body())
    assert answer.status == 201
    hold: dict[str, Any] = answer.json
    return hold


COMMIT_CASES = [
    pytest.param(b'{"token": 1', None, 400, "invalid_json", None, id="invalid-json"),
    pytest.param(b"", None, 400, "invalid_json", None, id="empty-body"),
    pytest.param(b'{"token": 1, "token": 2}', None, 400, "duplicate_key", None, id="duplicate"),
    pytest.param(b'{"token": NaN}', None, 400, "non_finite_number", None, id="NaN"),
    pytest.param(
        b'{"token": 9007199254740993}', None, 400, "number_out_of_range", None, id="2**53"
    ),
    pytest.param(b'{"token": 1e400}', None, 400, "number_out_of_range", None, id="1e400"),
    pytest.param(b"[1]", None, 422, "invalid_body", None, id="array-body"),
    pytest.param(b"{}", None, 422, "missing_field", "token", id="no-token"),
    pytest.param(b'{"token": "1"}', None, 422, "invalid_field", "token", id="token-string"),
    pytest.param(b'{"token": 1.0}', None, 422, "invalid_field", "token", id="token-float"),
    pytest.param(b'{"token": -1}', None, 422, "invalid_field", "token", id="token-negative"),
    pytest.param(b'{"token": 1, "force": true}', None, 422, "unknown_field", "force", id="unknown"),
    pytest.param(
        b'{"token": 1}', {"Idempotency-Key": ""},
        422, "invalid_idempotency_key", "Idempotency-Key", id="idempotency-key-empty",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("raw", "headers", "status", "code", "field"), COMMIT_CASES)
async def test_bad_commit_is_refused_and_nothing_is_written(
    server: Server,
    agent: Client,
    placed: dict[str, Any],
    raw: bytes,
    headers: dict[str, str] | None,
    status: int,
    code: str,
    field: str | None,
) -> None:
    before = snapshot(server)
    answer = await agent.post(f"/v1/holds/{placed['id']}/commit", raw=raw, headers=headers)
    assert_problem(answer, status, code, field)
    assert snapshot(server) == before
    after = await agent.get(f"/v1/holds/{placed['id']}")
    assert after.json["status"] == "held"
    assert after.json["token"] == placed["token"]


RELEASE_CASES = [
    pytest.param(b"{", None, 400, "invalid_json", None, id="invalid-json"),
    pytest.param(b"\xff\xfe{}", None, 400, "invalid_utf8", None, id="invalid-utf8"),
    pytest.param(b'{"a": 1, "a": 1}', None, 400, "duplicate_key", None, id="duplicate"),
    pytest.param(b"[]", None, 422, "invalid_body", None, id="array-body"),
    pytest.param(b'{"reason": "x"}', None, 422, "unknown_field", "reason", id="unknown-field"),
    pytest.param(
        b"", {"Idempotency-Key": "x" * 256},
        422, "invalid_idempotency_key", "Idempotency-Key", id="idempotency-key-256-chars",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("raw", "headers", "status", "code", "field"), RELEASE_CASES)
async def test_bad_release_is_refused_and_nothing_is_written(
    server: Server,
    agent: Client,
    placed: dict[str, Any],
    raw: bytes,
    headers: dict[str, str] | None,
    status: int,
    code: str,
    field: str | None,
) -> None:
    before = snapshot(server)
    answer = await agent.post(f"/v1/holds/{placed['id']}/release", raw=raw, headers=headers)
    assert_problem(answer, status, code, field)
    assert snapshot(server) == before
    after = await agent.get(f"/v1/holds/{placed['id']}")
    assert after.json["status"] == "held"


def _args(**changes: Any) -> dict[str, Any]:
    args = {k: v for k, v in BASE.items() if k not in ("workflow_id", "step")}
    args.update(changes)
    return {k: v for k, v in args.items() if v is not DROP}


def envelope(**changes: Any) -> bytes:
    doc = {"workflow_id": "wf-42", "step": 3, "tool": "create_calendar_hold", "arguments": _args()}
    doc.update(changes)
    return json.dumps({k: v for k, v in doc.items() if v is not DROP}).encode()


TOOL_CASES = [
    pytest.param(b"{", 400, "invalid_json", None, id="invalid-json"),
    pytest.param(
        envelope()[:-1] + b', "tool": "find_free_slots"}', 400, "duplicate_key", None, id="dup"
    ),
    pytest.param(
        envelope(arguments=_args(priority=2**53)), 400, "number_out_of_range", None, id="2**53"
    ),
    pytest.param(b"[]", 422, "invalid_body", None, id="array-body"),
    pytest.param(envelope(tool="delete_calendar"), 422, "invalid_field", "tool", id="bad-tool"),
    pytest.param(envelope(tool=DROP), 422, "missing_field", "tool", id="no-tool"),
    pytest.param(envelope(arguments=[]), 422, "invalid_field", "arguments", id="args-array"),
    pytest.param(envelope(arguments=DROP), 422, "missing_field", "arguments", id="no-args"),
    pytest.param(envelope(step="3"), 422, "invalid_step", "step", id="step-string"),
    pytest.param(envelope(step=3.0), 422, "invalid_step", "step", id="step-float"),
    pytest.param(envelope(extra=1), 422, "unknown_field", "extra", id="unknown-envelope-field"),
    pytest.param(
        envelope(workflow_id=DROP), 422, "missing_field", "workflow_id", id="create-no-workflow"
    ),
    pytest.param(
        envelope(arguments=_args(titel="x")), 422, "unknown_field", "titel", id="unknown-argument"
    ),
    pytest.param(
        envelope(arguments=_args(start_time=BASE["start"])),
        422, "invalid_field", "arguments.start_time", id="start-and-start_time",
    ),
    pytest.param(
        envelope(arguments=_args(start=DROP)),
        422, "missing_field", "arguments.start", id="no-start",
    ),
    pytest.param(
        envelope(arguments=_args(attendees=MANY)), 422, "invalid_field", "attendees", id="101-att"
    ),
    pytest.param(
        envelope(arguments=_args(start="2030-09-30T14:00:00Z")),
        422, "start_in_past", "start", id="start-in-past",
    ),
    pytest.param(
        envelope(arguments=_args(priority=51)),
        422, "priority_too_high", "priority", id="priority-above-agent",
    ),
    pytest.param(
        envelope(tool="commit_calendar_hold", arguments={"hold_id": "hold_x", "token": "1"}),
        422, "invalid_field", "token", id="commit-token-string",
    ),
    pytest.param(
        envelope(tool="release_calendar_hold", arguments={}),
        422, "missing_field", "hold_id", id="release-no-hold-id",
    ),
    pytest.param(
        envelope(
            tool="find_free_slots",
            arguments={"attendees": ["alex@example.com"], "from": "2030-10-14T09:00:00Z",
                       "to": "2030-10-14T17:00:00Z"},
        ),
        422, "missing_field", "duration_minutes", id="slots-no-duration",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("raw", "status", "code", "field"), TOOL_CASES)
async def test_bad_tool_call_is_refused_and_nothing_is_written(
    server: Server, agent: Client, raw: bytes, status: int, code: str, field: str | None
) -> None:
    before = snapshot(server)
    answer = await agent.post("/v1/tool-calls", raw=raw)
    assert_problem(answer, status, code, field)
    assert snapshot(server) == before


ATTENDEE_CASES = [
    pytest.param(b'{"emails": ["a@example.com"],', 400, "invalid_json", None, id="invalid-json"),
    pytest.param(
        b'{"emails": ["a@example.com"], "emails": []}', 400, "duplicate_key", None, id="duplicate"
    ),
    pytest.param(b"[]", 422, "invalid_body", None, id="array-body"),
    pytest.param(b"{}", 422, "missing_field", "emails", id="no-emails"),
    pytest.param(b'{"emails": []}', 422, "invalid_field", "emails", id="zero-emails"),
    pytest.param(
        json.dumps({"emails": [f"p{i}@example.com" for i in range(51)]}).encode(),
        422, "invalid_field", "emails", id="51-emails",
    ),
    pytest.param(
        b'{"emails": ["a@example.com"], "id": "-leading-dash"}',
        422, "invalid_field", "id", id="bad-id",
    ),
    pytest.param(
        b'{"emails": ["a@example.com"], "aliases": []}',
        422, "unknown_field", "aliases", id="unknown",
    ),
    pytest.param(
        b'{"emails": ["not-an-email"]}', 422, "invalid_attendee", None, id="bad-email"
    ),
    pytest.param(
        b'{"emails": ["a@example.com", "bob@"]}', 422, "invalid_attendee", None, id="bad-2nd"
    ),
]  # fmt: skip


@pytest.mark.parametrize(("raw", "status", "code", "field"), ATTENDEE_CASES)
async def test_bad_attendee_put_is_refused_and_nothing_is_written(
    server: Server, raw: bytes, status: int, code: str, field: str | None
) -> None:
    admin = await server.key(agent="ops", role="admin")
    before = snapshot(server)
    answer = await admin.post("/v1/attendees", raw=raw)
    assert_problem(answer, status, code, field)
    assert snapshot(server) == before


AVAILABILITY = "attendees=alex@example.com&from=2030-10-14T09:00:00Z&to=2030-10-14T17:00:00Z"

QUERY_CASES = [
    pytest.param(
        "/v1/availability?attendees=alex@example.com&to=2030-10-14T17:00:00Z",
        "missing_field", "from", id="availability-no-from",
    ),
    pytest.param(
        "/v1/availability?attendees=alex@example.com&from=2030-10-14T09:00:00Z",
        "missing_field", "to", id="availability-no-to",
    ),
    pytest.param(
        "/v1/availability?from=2030-10-14T09:00:00Z&to=2030-10-14T17:00:00Z",
        "invalid_attendees", "attendees", id="availability-no-attendees",
    ),
    pytest.param(
        "/v1/availability?attendees=alex@&from=2030-10-14T09:00:00Z&to=2030-10-14T17:00:00Z",
        "invalid_attendee", "attendees", id="availability-bad-email",
    ),
    pytest.param(
        "/v1/availability?attendees=alex@example.com"
        "&from=2030-10-14T17:00:00Z&to=2030-10-14T09:00:00Z",
        "invalid_interval", None, id="availability-to-before-from",
    ),
    pytest.param(
        "/v1/availability?attendees=alex@example.com"
        "&from=2030-10-14T09:00:00Z&to=2030-11-14T09:00:00Z",
        "window_too_long", None, id="availability-window-too-long",
    ),
    pytest.param(
        "/v1/availability?attendees=alex@example.com&from=2030-10-14T09:00:00"
        "&to=2030-10-14T17:00:00",
        "naive_datetime", "from", id="availability-naive",
    ),
    pytest.param(
        "/v1/availability?attendees=alex@example.com&from=2030-10-14T09:00:00"
        "&to=2030-10-14T17:00:00&timezone=Mars/Base",
        "unknown_timezone", "timezone", id="availability-bad-timezone",
    ),
    pytest.param(
        f"/v1/availability?{AVAILABILITY}&duration_minutes=thirty",
        "invalid_field", "duration_minutes", id="availability-duration-prose",
    ),
    pytest.param(
        f"/v1/availability?{AVAILABILITY}&duration_minutes=0",
        "invalid_field", "duration_minutes", id="availability-duration-0",
    ),
    pytest.param(
        f"/v1/availability?{AVAILABILITY}&duration_minutes=-30",
        "invalid_field", "duration_minutes", id="availability-duration-negative",
    ),
    pytest.param(
        f"/v1/availability?{AVAILABILITY}&duration_minutes=30&limit=51",
        "invalid_field", "limit", id="availability-limit-51",
    ),
    pytest.param("/v1/holds?status=bogus", "invalid_field", "status", id="holds-status-unknown"),
    pytest.param("/v1/holds?status=,", "invalid_field", "status", id="holds-status-empty"),
    pytest.param(
        "/v1/holds?status=held,Held", "invalid_field", "status", id="holds-status-wrong-case"
    ),
    pytest.param("/v1/holds?limit=0", "invalid_field", "limit", id="holds-limit-0"),
    pytest.param("/v1/holds?limit=201", "invalid_field", "limit", id="holds-limit-201"),
    pytest.param("/v1/holds?limit=ten", "invalid_field", "limit", id="holds-limit-prose"),
    pytest.param("/v1/holds?limit=-1", "invalid_field", "limit", id="holds-limit-negative"),
    pytest.param(
        "/v1/holds?attendee=not%20an%20id", "invalid_attendee", "attendees", id="holds-bad-attendee"
    ),
    pytest.param("/v1/audit?cursor=abc", "invalid_field", "cursor", id="audit-cursor-prose"),
    pytest.param("/v1/audit?limit=501", "invalid_field", "limit", id="audit-limit-501"),
]  # fmt: skip


@pytest.mark.parametrize(("path", "code", "field"), QUERY_CASES)
async def test_bad_query_parameters_are_refused(
    server: Server, agent: Client, path: str, code: str, field: str | None
) -> None:
    before = snapshot(server)
    answer = await agent.get(path)
    assert_problem(answer, 422, code, field)
    assert snapshot(server) == before


# -- routing ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/v1/nope"),
        ("POST", "/v1/hold"),
        ("GET", "/v2/holds"),
        ("POST", "/v1/holds/hold_x/cancel"),
        ("GET", "/"),
    ],
)
async def test_unknown_route_is_a_404_problem(
    server: Server, agent: Client, method: str, path: str
) -> None:
    before = snapshot(server)
    answer = await agent.request(method, path, raw=b"{}")
    assert_problem(answer, 404, "route_not_found")
    assert snapshot(server) == before


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("DELETE", "/v1/holds"),
        ("PUT", "/v1/holds"),
        ("DELETE", "/v1/holds/hold_x"),
        ("GET", "/v1/holds/hold_x/commit"),
        ("PATCH", "/v1/attendees"),
        ("POST", "/v1/availability"),
        ("POST", "/healthz"),
    ],
)
async def test_wrong_method_is_a_405_problem_with_allow(
    server: Server, agent: Client, method: str, path: str
) -> None:
    before = snapshot(server)
    answer = await agent.request(method, path, raw=b"{}")
    assert_problem(answer, 405, "method_not_allowed")
    assert answer.headers.get("Allow")
    assert method not in answer.headers["Allow"].split(",")
    assert snapshot(server) == before


@pytest.mark.parametrize(
    "path", ["/v1/holds?workflow=wf-1", "/v1/audit?limits=5", "/v1/executions/k?verbose=1"]
)
async def test_unknown_query_parameters_are_refused(server: Server, path: str) -> None:
    agent = await server.key()
    answer = await agent.get(path)
    assert answer.status == 422
    assert answer.json["code"] == "unknown_field"
    assert answer.json["field"] == path.split("?")[1].split("=")[0]


async def test_a_body_that_never_finishes_arriving_is_408(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("slotward.api.http.jsonbody.BODY_SECONDS", 0.3)
    agent = await server.key()
    host, port = server.base.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    head = (
        f"POST /v1/holds HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {agent.secret}\r\n"
        "Content-Type: application/json\r\nContent-Length: 100\r\n\r\n"
    )
    writer.write(head.encode() + b'{"workflow_id":')  # and then nothing more
    await writer.drain()
    status_line = await asyncio.wait_for(reader.readline(), 30)  # bounded; not a timing check
    writer.close()
    assert status_line.startswith(b"HTTP/1.1 408")
    before = server.table_counts()
    assert (await agent.create(dict(HOLD_BODY))).status == 201  # the server serves on
    assert server.table_counts()["holds"] == before["holds"] + 1
