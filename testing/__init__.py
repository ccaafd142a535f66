"""slotward.testing: check what a slotward server told its clients against what it kept.

For tests of whatever is built on slotward (as ``structlog.testing`` is for
structlog's users), and for slotward's own tests and benchmarks. Record every
call the clients make as a :class:`Call` (the request, the answer's status,
headers and body, the client's times, an optional intent label), read the
store once when the server is done (:func:`load_snapshot`, or
:func:`check_store` to read and check in one step), and :func:`check` returns
every broken promise of DESIGN sections 3-5 (one effect per key and per
intent, no double booking, preemption only by a higher priority, commits with
the current token, acknowledged writes present, identical replays) as a
:class:`Violation`; an empty list means the history is consistent. A call
that got no answer (``status=None``) is indeterminate: no rule blames it.

Each rule is also a function of its own (:data:`RULES`), so a test can aim at
one. A minimal history::

    from slotward.testing import Call, check_store

    invoked = time.time()
    async with session.post(f"{base}/v1/holds", json=body, headers=auth) as resp:
        raw = await resp.read()
    calls.append(Call(op="create", tenant="acme", agent="agent-1", request=body,
                      status=resp.status, body=raw, headers=dict(resp.headers),
                      invoked_at=invoked, completed_at=time.time()))
    ...  # every call, then stop the server
    assert check_store("sqlite:///slotward.db", calls) == []
"""

from slotward.testing.history import (
    RULES,
    acknowledged_writes_present,
    check,
    commits_with_current_token,
    no_overlap,
    one_effect_per_key,
    one_key_per_intent,
    preemption_by_higher_priority,
    replays_identical,
)
from slotward.testing.recorded import Call, Op, Snapshot, Violation
from slotward.testing.snapshot import check_store, load_snapshot, sync_url

__all__ = [
    "RULES",
    "Call",
    "Op",
    "Snapshot",
    "Violation",
    "acknowledged_writes_present",
    "check",
    "check_store",
    "commits_with_current_token",
    "load_snapshot",
    "no_overlap",
    "one_effect_per_key",
    "one_key_per_intent",
    "preemption_by_higher_priority",
    "replays_identical",
    "sync_url",
]
