"""The Python client's errors: one tree, built from the server's problem+json.

    SlotwardError          any non-2xx answer (and ``Unreachable``): status, code, detail,
    │                      retryable, problem (the whole problem document)
    ├── SlotConflict       409 slot_conflict: conflicts and alternatives; pick one, try it
    ├── HoldLost           409 hold_expired, hold_preempted, hold_released: this hold can no
    │                      longer be committed; place a new one
    └── Unreachable        no answer at all once retries ran out (status 0): connection
                           refused or reset, a timeout, the call's deadline

The classes are the answers an agent acts on differently; every other code is
a plain :class:`SlotwardError` whose ``code`` is the server's stable code (the
README's "Errors" lists them). ``retryable`` is the server's own word (true for
``slot_conflict`` too: the slot may free up later); the client's automatic
retries are narrower (api/client/retry.py).

No message, repr or attribute of these errors holds the API key: they are made
from the server's answer and the request's method and path only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from slotward.api.client.results import Alternative, Conflict

__all__ = ["HoldLost", "SlotConflict", "SlotwardError", "Unreachable", "error_from"]

_HOLD_LOST = frozenset({"hold_expired", "hold_preempted", "hold_released"})


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


class Unreachable(SlotwardError):
    """No answer from the server (status 0) after every retry: ``code`` says why."""


def _dicts(value: object) -> list[dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


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
    return kind(
        status, code, detail, retryable=problem.get("retryable") is True, problem=problem,
        retry_after=retry_after, idempotency_key=idempotency_key,
    )  # fmt: skip
