"""Recorded calls, for the history checker (``slotward.testing``), and the check itself.

Every benchmark records every call it makes to slotward and holds them against
the database at the end (:func:`check_history`): a violation is a problem (the
run exits 1). Two recorders feed it. The load generator records every call of
a phase with ``record`` (request, status, raw body, the Idempotency-Key and
Idempotent-Replayed headers, start and end in epoch seconds, intent label) in
its JSON answer, which :func:`calls_of` turns into the checker's
:class:`~slotward.testing.Call` values; the benchmarks that call slotward from
their own aiohttp session (relay, waiters) post through a :class:`Recorder`.
Checking a database against calls is :func:`slotward.testing.check_store`,
which users call too; a benchmark with a large seeded store may pass a
snapshot of the part its calls touched instead (benchmarks/scale.py).
"""

from __future__ import annotations

import base64
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from slotward.benchmarks.results import Outcome
from slotward.engine.clock import SystemClock
from slotward.engine.model import Principal
from slotward.testing import Call, Op, check_store
from slotward.testing.history import check
from slotward.testing.recorded import Snapshot, Violation

__all__ = ["Recorder", "calls_of", "check_history", "violations"]

_OPS: Mapping[str, Op] = {"post": "create", "commit": "commit", "release": "release"}
_HEADERS = ("Idempotency-Key", "Idempotent-Replayed")


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


def check_history(
    outcome: Outcome,
    url: str,
    calls: Sequence[Call],
    snapshot: Callable[[], Snapshot] | None = None,
    label: str = "",
) -> None:
    """Check ``calls`` against the database at ``url`` (or against ``snapshot()``, read
    now); every violation is a problem of ``outcome``, and a note (``label``: of what)
    says how long it took."""
    started = time.perf_counter()
    if snapshot is None:
        found = violations(url, calls)
    else:
        read = snapshot()
        now = SystemClock().now()  # the snapshot's instant
        found = [_line(v) for v in check(calls, read, now)]
    took = time.perf_counter() - started
    outcome.problems += found
    said = f"history ({label})" if label else "history"
    outcome.notes.append(f"{said}: {len(calls)} calls checked in {took:.1f} s, "
                         f"{len(found)} violations")  # fmt: skip


def _line(v: Violation) -> str:
    return f"{v.rule}: {v.detail}"


@dataclass
class Recorder:
    """Posts to slotward from a benchmark's own session, recording each call in full.

    A call that raised (no answer: a timeout, a reset) is recorded with no
    status, as the checker wants an indeterminate call, and the error raised on.
    """

    calls: list[Call] = field(default_factory=list)

    async def post(
        self,
        session: aiohttp.ClientSession,
        url: str,
        body: Mapping[str, Any],
        *,
        who: Principal,
        secret: str,
        op: Op,
        target: str | None = None,
        intent: str | None = None,
        patience: aiohttp.ClientTimeout | None = None,
    ) -> tuple[int, bytes, Mapping[str, str]]:
        """POST ``body`` to ``url`` as ``who``; its status, raw body and idempotency headers."""
        headers = {"Authorization": f"Bearer {secret}"}
        invoked = time.time()
        status: int | None = None
        raw, answered = b"", {}
        try:
            async with session.post(url, json=body, headers=headers, timeout=patience) as resp:
                raw = await resp.read()
                status = resp.status
                answered = {h: resp.headers[h] for h in _HEADERS if h in resp.headers}
            return status, raw, answered
        finally:
            self.calls.append(Call(
                op=op, tenant=who.tenant, agent=who.agent_id, request=dict(body),
                status=status, body=raw, headers=answered, target=target,
                invoked_at=invoked, completed_at=None if status is None else time.time(),
                intent=intent,
            ))  # fmt: skip
