"""Answers of a tool call, and the MCP tool results made of them.

A call answers a document (the hold, the availability) or a problem: the
problem+json body the HTTP API answers (RFC 9457: code, detail, retryable and
the code's own members, such as a conflict's ``conflicts`` and
``alternatives``). Over MCP a problem is a tool error result (``isError``)
whose structured content is that problem plus ``next``: what the model should
do about it. A commit that waits for a person's approval (the HTTP API's 202,
``outcome: "approval_required"``) is no error: nothing went wrong, the
booking is on its way; its result carries ``next`` too. Nothing else reaches
the model: an unexpected failure is logged here and answered as
``internal_error``, never with its traceback or message.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from mcp.types import CallToolResult, TextContent

from slotward.api.http.problems import problem_document
from slotward.engine.codes import CODES
from slotward.engine.errors import (
    Conflict,
    Forbidden,
    NotFound,
    SlotConflict,
    SlotwardError,
    Unauthenticated,
    ValidationFailed,
)
from slotward.engine.tools import COMMIT_HOLD, CREATE_HOLD, FIND_FREE_SLOTS, RELEASE_HOLD

__all__ = ["AWAITING", "NO_KEY", "Answer", "next_step", "problem_answer", "tool_result"]

# What a call without an API key is told (missing_api_key), embedded or remote.
NO_KEY = (
    "no API key: start slotward mcp with --key or SLOTWARD_API_KEY, "
    "or send 'Authorization: Bearer <api key>'"
)
# _meta members of a result (MCP reserves unprefixed names).
REPLAYED = "slotward/replayed"
IDEMPOTENCY_KEY = "slotward/idempotency_key"

# The outcome of a commit that waits for a person (docs/approvals.md), and what
# the model does meanwhile: nothing but tell the user, and commit again later.
APPROVAL_REQUIRED = "approval_required"
AWAITING = (
    "A person must approve this commit first: nothing is booked yet, and the hold is kept "
    "for you while `approval` is pending (until `approval.expires_at`). Tell the user it "
    f"awaits approval. Later, call {COMMIT_HOLD.name} again with the same `hold_id` and "
    "`token`: it answers the same while nobody has decided, commits once approved, or "
    "fails with approval_denied. Do not place another hold for this meeting."
)
# Codes whose advice is their own rather than their family's.
_BY_CODE = {
    "approval_denied": (
        "A person denied this commit (`approval.note` may say why): do not commit it again. "
        f"Tell the user, and release the hold with {RELEASE_HOLD.name} so its slot is free "
        "for others."
    ),
    "approval_expired": (
        "Nobody decided on this commit in time, and its hold lapsed with the approval: do not "
        f"commit it again. Tell the user; to ask again, call {CREATE_HOLD.name} for the slot "
        f"with a new `step` (or for another slot), then {COMMIT_HOLD.name}."
    ),
}


@dataclass(frozen=True)
class Answer:
    """What a call answered: a document, or a problem (``is_problem``).

    ``replayed`` and ``idempotency_key`` are the HTTP headers of the same
    names, where the call had them.
    """

    document: dict[str, Any]
    is_problem: bool = False
    replayed: bool | None = None
    idempotency_key: str | None = None


def problem_answer(error: SlotwardError) -> Answer:
    """The problem the HTTP API would answer for ``error`` (api/http/problems.py)."""
    document = problem_document(error)
    if error.retry_after is not None:
        document["retry_after"] = error.retry_after
    return Answer(document, is_problem=True, idempotency_key=error.idempotency_key)


def next_step(problem: dict[str, Any]) -> str:
    """What a model should do about ``problem``, by its code's family (engine/codes.py)."""
    code = problem.get("code")
    if isinstance(code, str) and code in _BY_CODE:
        return _BY_CODE[code]
    known = CODES.get(code) if isinstance(code, str) else None
    family = known.family if known is not None else None
    if family is not None and issubclass(family, SlotConflict):
        return _after_conflict(problem)
    if problem.get("retryable") is True:
        wait = problem.get("retry_after")
        after = f" after {wait} s" if isinstance(wait, int) else " shortly"
        return f"Retry the same call unchanged{after}: a retry is safe, it lands once."
    if family is not None and issubclass(family, ValidationFailed):
        field = problem.get("field")
        named = f" `{field}`" if isinstance(field, str) else ""
        return f"Fix the argument{named} as `detail` says and call again."
    if family is not None and issubclass(family, Unauthenticated | Forbidden):
        return "This server's API key may not do this: tell the user; retrying will not help."
    if family is not None and issubclass(family, NotFound):
        return "Check the id: it names nothing this key can see."
    if family is not None and issubclass(family, Conflict):
        return f"The hold cannot do this now (see `detail`); to book, call {CREATE_HOLD.name} anew."
    return "The call cannot succeed as sent: see `detail`."


def _after_conflict(problem: dict[str, Any]) -> str:
    advice = (
        "The slot is taken. Pick one of `alternatives` (free for every attendee) and call "
        f"{CREATE_HOLD.name} again with its start and end, or call {FIND_FREE_SLOTS.name} "
        "for more; `conflicts` says who is busy when."
    )
    conflicts = problem.get("conflicts")
    if isinstance(conflicts, list) and any(
        isinstance(c, dict) and c.get("same_intent") is True for c in conflicts
    ):
        advice += (
            " A conflict with `same_intent: true` is your own hold of this very call, placed "
            "in another workflow (an earlier session): to get it back, call again with that "
            "workflow's `workflow_id`."
        )
    return advice


def tool_result(answer: Answer) -> CallToolResult:
    """The MCP tool result: structured content always, and the same JSON as text.

    A problem is an error result with ``next``; a commit waiting for a person
    is a result with ``next`` (:data:`AWAITING`), not an error.
    """
    meta: dict[str, Any] = {}
    if answer.replayed is not None:
        meta[REPLAYED] = answer.replayed
    if answer.idempotency_key is not None:
        meta[IDEMPOTENCY_KEY] = answer.idempotency_key
    if not answer.is_problem:
        document = answer.document
        if document.get("outcome") == APPROVAL_REQUIRED:
            document = {**document, "next": AWAITING}
        return CallToolResult(
            content=[TextContent(type="text", text=_json(document))],
            structured_content=document,
            _meta=meta or None,
        )
    problem = {**answer.document, "next": next_step(answer.document)}
    text = f"{problem.get('code')}: {problem.get('detail')}\n{_json(problem)}"
    return CallToolResult(
        content=[TextContent(type="text", text=text)],
        structured_content=problem,
        is_error=True,
        _meta=meta or None,
    )


def _json(document: dict[str, Any]) -> str:
    return json.dumps(document, ensure_ascii=False, separators=(",", ":"))
