"""The Python client's errors: one tree, built from the server's problem+json.

    SlotwardError          any non-2xx answer (and ``Unreachable``, ``ApprovalPending``):
    │                      status, code, detail, retryable, problem (the whole problem document)
    ├── SlotConflict       409 slot_conflict: conflicts and alternatives; pick one, try it
    ├── HoldLost           409 hold_expired, hold_preempted, hold_released: this hold can no
    │                      longer be committed; place a new one
    ├── ApprovalPending    202 approval_required: the commit waits for a person; its approval
    │                      and hold. Wait for the approval, then send the same commit again
    ├── ApprovalRefused    409 approval_denied, approval_expired: a person said no, or nobody
    │                      decided in time; its approval. Do not commit again
    └── Unreachable        no answer at all once retries ran out (status 0): connection
                           refused or reset, a timeout, the call's deadline

The classes are the answers an agent acts on differently; every other code is
a plain :class:`SlotwardError` whose ``code`` is the server's stable code (the
README's "Errors" lists them). ``retryable`` is the server's own word (true for
``slot_conflict`` too: the slot may free up later); the client's automatic
retries are narrower (api/client/retry.py). ``ApprovalPending`` is the one
error made of a 2xx answer: a commit that did not happen yet is no result to
return, and an agent must not go on as if it had booked.

No message, repr or attribute of these errors holds the API key: they are made
from the server's answer and the request's method and path only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from slotward.api.client.results import Alternative, Approval, Conflict, Hold

__all__ = [
    "ApprovalPending",
    "ApprovalRefused",
    "HoldLost",
    "SlotConflict",
    "SlotwardError",
    "Unreachable",
    "approval_pending",
    "error_from",
]

_HOLD_LOST = frozenset({"hold_expired", "hold_preempted", "hold_released"})
_REFUSED = frozenset({"approval_denied", "approval_expired"})
APPROVAL_REQUIRED = "approval_required"


class SlotwardError(Exception):
    """A call slotward refused, or one that got no answer (:class:`Unreachable`)."""

    def __init__(
        self,
        status: int,
        code: str | None,
        detail: str,
        *,
        retryable: bool = False,
        problem: Mapping[str, Any] | None = None,
        retry_after: float | None = None,
        idempotency_key: str | None = None,
    ) -> None:
        self.status = status
        self.code = code
        self.detail = detail
        self.retryable = retryable
        self.problem: dict[str, Any] = dict(problem or {})
        self.retry_after = retry_after  # seconds, from the answer's Retry-After
        self.idempotency_key = idempotency_key
        super().__init__(f"{status} {code or 'error'}: {detail}")

    def __repr__(self) -> str:
        return f"{type(self).__name__}(status={self.status}, code={self.code!r})"


class SlotConflict(SlotwardError):
    """409 ``slot_conflict``: what holds the slot, and free ``alternatives`` nearest first.

    ``conflicts`` and ``alternatives`` are the problem's own lists of dicts, ready to
    hand back to a model as JSON; ``conflict_entries`` and ``alternative_slots`` are
    the same entries typed.
    """

    @property
    def conflicts(self) -> list[dict[str, Any]]:
        return _dicts(self.problem.get("conflicts"))

    @property
    def alternatives(self) -> list[dict[str, Any]]:
        return _dicts(self.problem.get("alternatives"))

    @property
    def conflict_entries(self) -> list[Conflict]:
        return [Conflict.parse(c) for c in self.conflicts]

    @property
    def alternative_slots(self) -> list[Alternative]:
        return [Alternative.parse(a) for a in self.alternatives]

    @property
    def same_intent(self) -> bool:
        """True when another workflow already holds this very intent: stand down."""
        return any(c.same_intent for c in self.conflict_entries)


class HoldLost(SlotwardError):
    """409 ``hold_expired``, ``hold_preempted`` or ``hold_released``: book another hold."""


class ApprovalPending(SlotwardError):
    """202 ``approval_required``: the commit waits for a person's approval; nothing booked yet.

    ``approval`` is the approval it waits for (``approval.id`` for
    :meth:`~slotward.api.client.Slotward.wait_for_approval`), ``hold`` the hold
    as it is now (its ``expires_at`` stretched to the approval's: a pending
    approval keeps its hold alive). The same commit, sent again, answers the
    same while the approval is pending, commits once it is approved, and raises
    :class:`ApprovalRefused` once it is denied or expired
    (:meth:`~slotward.api.client.Slotward.commit_when_approved` does all of
    it). ``retryable`` is true: the same call succeeds later, once a person
    approves; the client never retries it on its own. ``problem`` is the
    202's whole document.
    """

    @property
    def approval(self) -> Approval:
        return Approval.parse(_dict(self.problem.get("approval")))

    @property
    def hold(self) -> Hold:
        return Hold.parse(_dict(self.problem.get("hold")))


class ApprovalRefused(SlotwardError):
    """409 ``approval_denied`` or ``approval_expired``: the commit will not happen.

    ``approval`` is the approval as it ended: denied (``decided_by`` and
    ``note`` say who and why; release the hold, or keep it for the user to
    decide) or expired (nobody decided in time; to ask again, place a new
    hold and commit it).
    """

    @property
    def approval(self) -> Approval:
        return Approval.parse(_dict(self.problem.get("approval")))


class Unreachable(SlotwardError):
    """No answer from the server (status 0) after every retry: ``code`` says why."""


def _dicts(value: object) -> list[dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _dict(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def approval_pending(body: object, headers: Mapping[str, str]) -> ApprovalPending:
    """The error a 202 ``approval_required`` answer is; ``body`` is its parsed JSON,
    ``headers`` its headers (any mapping; case as sent)."""
    doc = _dict(body)
    detail = doc.get("detail")
    if not isinstance(detail, str):
        detail = "a person must approve this commit first"
    key = {k.lower(): v for k, v in headers.items()}.get("idempotency-key")
    return ApprovalPending(
        202, APPROVAL_REQUIRED, detail, retryable=True, problem=doc, idempotency_key=key
    )


def error_from(
    status: int,
    body: object,
    *,
    retry_after: float | None = None,
    idempotency_key: str | None = None,
) -> SlotwardError:
    """The error for a non-2xx answer; ``body`` is its parsed JSON (anything, if it was not)."""
    problem = body if isinstance(body, dict) else {}
    code = problem.get("code") if isinstance(problem.get("code"), str) else None
    detail = problem.get("detail")
    if not isinstance(detail, str):
        detail = f"HTTP {status} without a problem document"
    kind: type[SlotwardError] = SlotwardError
    if code == "slot_conflict":
        kind = SlotConflict
    elif code in _HOLD_LOST:
        kind = HoldLost
    elif code in _REFUSED:
        kind = ApprovalRefused
    return kind(
        status, code, detail, retryable=problem.get("retryable") is True, problem=problem,
        retry_after=retry_after, idempotency_key=idempotency_key,
    )  # fmt: skip
