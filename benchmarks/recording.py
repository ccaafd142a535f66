"""The load generator's recorded calls, for the history checker (``slotward.testing``).

The load generator records every call of a phase with ``record`` (request,
status, raw body, the Idempotency-Key and Idempotent-Replayed headers, start
and end in epoch seconds, intent label) in its JSON answer; here those records
become the checker's :class:`~slotward.testing.Call` values. Only that format
is the benchmarks' own: checking a database against calls is
:func:`slotward.testing.check_store`, which users call too.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from typing import Any

from slotward.engine.model import Principal
from slotward.testing import Call, Op, check_store

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
    return [f"{v.rule}: {v.detail}" for v in check_store(url, calls)]
