"""Recorded calls for the history checker (``slotward.testing.history``).

The load generator records every call of a phase with ``record`` (request,
status, raw body, the Idempotency-Key and Idempotent-Replayed headers, start
and end in epoch seconds, intent label); here they become the checker's
:class:`~slotward.testing.history.Call` values, and a database is checked
against them.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from slotward.engine.model import Principal
from slotward.testing.history import Call, Op, check
from slotward.testing.snapshot import load_snapshot

__all__ = ["calls_of", "violations"]

_OPS: Mapping[str, Op] = {"post": "create", "commit": "commit", "release": "release"}


def calls_of(records: Sequence[Mapping[str, Any]], principals: Sequence[Principal]) -> list[Call]:
    """The load generator's records as calls; ``principals[i]`` owns key ``i``."""
    return [
        Call(
            op=_OPS[str(r["op"])],
            tenant=principals[int(r["key"])].tenant,
            agent=principals[int(r["key"])].agent_id,
            request=r["request"],
            status=r["status"],
            body=base64.b64decode(r["body"]),
            headers=r["headers"],
            target=r["target"],
            idempotency_key_sent=r["sent_key"],
            invoked_at=r["invoked"],
            completed_at=r["completed"],
            intent=r["intent"],
        )
        for r in records
    ]


def violations(url: str, calls: Sequence[Call]) -> list[str]:
    """What the history checker finds wrong with ``calls`` against the database at ``url``."""
    snapshot = load_snapshot(url)
    now = datetime.now(UTC)  # the snapshot's instant
    return [f"{v.rule}: {v.detail}" for v in check(calls, snapshot, now)]
