"""What a tool call answered, and the tool-result messages handed back to a model.

An :class:`Outcome` is one call's answer as HTTP would give it (status, key,
replayed, document). With ``?reply=openai`` or ``?reply=anthropic`` it becomes
the message the model's API takes next: an error is a tool result too (the
problem, and in ``what_to_do`` what the model can do about it), since the
model, not the transport, is the one to act on a taken slot. No aiohttp here.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from slotward.api.tool_formats import one_of
from slotward.engine.model import Reply
from slotward.engine.tools import COMMIT_HOLD, CREATE_HOLD, FIND_FREE_SLOTS, RELEASE_HOLD

__all__ = [
    "REPLIES",
    "Outcome",
    "ReplyFormat",
    "batch_document",
    "check_reply",
    "reply_for",
    "what_to_do",
]

ReplyFormat = Literal["openai", "anthropic"]
REPLIES: tuple[ReplyFormat, ...] = ("openai", "anthropic")


@dataclass(frozen=True)
class Outcome:
    """One call's answer: the tool's document, or its problem when ``status >= 400``.

    ``key`` and ``replayed`` are the Idempotency-Key and Idempotent-Replayed of
    a write (``None`` for a read, or a refusal no key was derived for).
    """

    call_id: str | None
    tool: str | None
    status: int
    key: str | None
    replayed: bool | None
    document: dict[str, Any]
    retry_after: int | None = None
    # The write's own answer, for the access log and metrics of a single call.
    reply: Reply | None = None

    @property
    def failed(self) -> bool:
        return self.status >= 400

    def content(self) -> dict[str, Any]:
        """What the model is shown: the document, and for a problem what to do.

        A replayed commit or release also says the hold's status now
        (``hold_status``, as the batch document and the single call's
        Slotward-Hold-Status header do), and a problem worth waiting on says how
        long (``retry_after``, which ``what_to_do`` points at).
        """
        shown = dict(self.document)
        if self.reply is not None and self.reply.hold_status is not None:
            shown["hold_status"] = self.reply.hold_status
        if self.reply is not None and self.reply.accepted:
            return {**shown, "what_to_do": _AWAITING}
        if not self.failed:
            return shown
        if self.retry_after is not None:
            shown["retry_after"] = self.retry_after
        return {**shown, "what_to_do": what_to_do(self.document)}


def batch_document(outcomes: Sequence[Outcome]) -> dict[str, Any]:
    """A batch's answer without ``?reply``: each call's own status, key and body."""
    results = []
    for index, outcome in enumerate(outcomes):
        entry: dict[str, Any] = {
            "index": index,
            "id": outcome.call_id,
            "tool": outcome.tool,
            "status": outcome.status,
            "idempotency_key": outcome.key,
            "replayed": outcome.replayed,
        }
        entry["problem" if outcome.failed else "body"] = outcome.document
        if outcome.reply is not None and outcome.reply.hold_status is not None:
            # A replayed commit or release: the hold's status now (its header alone).
            entry["hold_status"] = outcome.reply.hold_status
        if outcome.retry_after is not None:
            entry["retry_after"] = outcome.retry_after  # the seconds Retry-After would say
        results.append(entry)
    return {"results": results}


def reply_for(
    reply: ReplyFormat, outcomes: Sequence[Outcome], *, batch: bool, responses: bool = False
) -> Any:
    """The tool-result message(s) answering ``outcomes`` in ``reply``'s format.

    OpenAI: one ``{"role": "tool", ...}`` message per call (a list for a batch);
    for calls of its Responses API (``responses``), one ``function_call_output``
    input item per call instead. Anthropic: one user message holding a
    ``tool_result`` block per call.
    """
    if reply == "openai" and responses:
        items = [
            {"type": "function_call_output", "call_id": o.call_id, "output": _text(o.content())}
            for o in outcomes
        ]
        return items if batch else items[0]
    if reply == "openai":
        messages = [
            {"role": "tool", "tool_call_id": o.call_id, "content": _text(o.content())}
            for o in outcomes
        ]
        return messages if batch else messages[0]
    blocks = [
        {"type": "tool_result", "tool_use_id": o.call_id, "content": _text(o.content()),
         "is_error": o.failed}
        for o in outcomes
    ]  # fmt: skip
    return {"role": "user", "content": blocks}


def check_reply(value: str | None) -> ReplyFormat | None:
    """The ``reply`` query parameter: absent, ``openai`` or ``anthropic``."""
    return None if value is None else one_of(value, REPLIES, "reply")


def _text(doc: dict[str, Any]) -> str:
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False)


_RETRY = "Call again with the same arguments: the server derives the key, so it lands once."
_BY_CODE = {
    "slot_conflict": (
        "The slot is taken (see conflicts). Pick one of alternatives and call "
        f"{CREATE_HOLD.name} again with its start and end and the same workflow_id and step; "
        f"with no alternatives, call {FIND_FREE_SLOTS.name} over a wider window or ask the user."
    ),
    "request_in_progress": (
        "The same call is still being answered. Wait retry_after seconds, then call again "
        "with the same arguments: it lands once."
    ),
    "token_mismatch": "Commit with the token the hold's placement answered.",
    "hold_expired": (
        "The hold expired and another booking took its slot: choose another. Call "
        f"{FIND_FREE_SLOTS.name}, then {CREATE_HOLD.name} with one of its starts, or tell the user."
    ),
    "hold_preempted": (
        f"A higher-priority booking took the slot: call {FIND_FREE_SLOTS.name} and "
        f"{CREATE_HOLD.name} for another slot, or tell the user."
    ),
    "hold_released": (
        f"The hold was released and is gone. Call {FIND_FREE_SLOTS.name}, then "
        f"{CREATE_HOLD.name} with another start. Booking this very same slot again needs a "
        "new step from your runtime (step is not one of your arguments): the same slot in the "
        "same workflow and step answers with the released hold."
    ),
    "hold_committed": "The hold is already committed: nothing more to do for it.",
    "approval_denied": (
        "A person denied this commit (see approval.note): do not retry it. Release the hold "
        f"with {RELEASE_HOLD.name} and tell the user."
    ),
    "approval_expired": (
        "Nobody decided in time and the hold lapsed. Tell the user; to ask again, book the slot "
        f"again with {CREATE_HOLD.name} (a new step from your runtime) and commit it."
    ),
    "not_hold_owner": "Only the agent that placed the hold may change it.",
    "priority_too_high": "Leave priority out, or give one no higher than your agent's.",
}


# A commit that waits for a person (202): the same call, later, gets the outcome.
_AWAITING = (
    "A person must approve this commit first (see approval). Tell the user it awaits "
    f"approval; call {COMMIT_HOLD.name} again later with the same arguments: it answers the "
    "same until a person decides, then commits, or says approval_denied."
)


def what_to_do(problem: dict[str, Any]) -> str:
    """A sentence for a model reading ``problem``: how to get to an outcome from here."""
    code = problem.get("code")
    if isinstance(code, str) and code in _BY_CODE:
        return _BY_CODE[code]
    if problem.get("retryable") is True:
        return _RETRY
    status = problem.get("status")
    if status == 404:
        return "Nothing by that id in this tenant: check the hold_id a placement answered."
    if status in (401, 403):
        return "This key may not do that: tell the user; a retry will not help."
    field = problem.get("field")
    where = f" '{field}'" if isinstance(field, str) else " the arguments"
    return f"Correct{where} as detail says, then call again: sent unchanged, it fails the same way."
