"""The Python client of slotward's HTTP API, for agents and scripts.

    from slotward.api.client import Slotward, SlotConflict

    async with Slotward("http://127.0.0.1:8080", key) as sw:
        try:
            hold = await sw.create_hold(workflow_id="wf-42", step=3,
                                        attendees=["alex@example.com"],
                                        start="2030-10-14T14:00:00Z", duration_minutes=30)
        except SlotConflict as taken:
            ...  # taken.alternatives: free slots of the same length, nearest first
        else:
            await sw.commit_hold(hold.id, hold.token)  # ApprovalPending: a person decides first

A commit that a tenant's policy sends to a person raises ``ApprovalPending``;
``commit_when_approved`` waits for the decision (long polls) and commits, or
raises ``ApprovalRefused``. ``request_approval``, ``get_approval``,
``wait_for_approval``, ``list_approvals`` and ``decide_approval`` (a
reviewer's key) are the rest of approvals (docs/approvals.md).

The client retries what may succeed on a second try (no answer, 429, 503, 409
``request_in_progress``) with the same body, honouring ``Retry-After``: the
server derives the key from the call's intent, so a retry lands once and
answers the first result (``hold.replayed``). docs/client.md is the tour.

The parts: the async client (api/client/session.py), the wire and its retries
(api/client/wire.py, api/client/retry.py), typed answers (api/client/results.py), errors
(api/client/errors.py) and the sync wrapper (api/client/sync.py).
"""

from __future__ import annotations

from slotward.api.client.errors import (
    ApprovalPending,
    ApprovalRefused,
    HoldLost,
    SlotConflict,
    SlotwardError,
    Unreachable,
)
from slotward.api.client.results import (
    Alternative,
    Approval,
    Availability,
    Busy,
    Conflict,
    Hold,
    Interval,
    ToolAnswer,
)
from slotward.api.client.retry import RetryEvent, RetryPolicy
from slotward.api.client.session import Slotward
from slotward.api.client.sync import SyncSlotward

__all__ = [
    "Alternative",
    "Approval",
    "ApprovalPending",
    "ApprovalRefused",
    "Availability",
    "Busy",
    "Conflict",
    "Hold",
    "HoldLost",
    "Interval",
    "RetryEvent",
    "RetryPolicy",
    "SlotConflict",
    "Slotward",
    "SlotwardError",
    "SyncSlotward",
    "ToolAnswer",
    "Unreachable",
]
