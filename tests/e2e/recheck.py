"""The crash test's verdict on a recorded history, and its offline re-check.

``problems`` is what tests/e2e/test_crash.py asserts empty; from a saved file,

    python -m tests.e2e.recheck FILE

prints the same problems (exit 1) or says the history is consistent (exit 0).
It runs the history checker (``slotward.testing.history.check``) and the outbox
and audit checks: every acknowledged change of a hold (a fresh answer, or a
replay whose first answer a crash cut off) has its event and audit entry once;
every lease granted and every completion acknowledged has its audit entry; the
chains verify; no hold record is left ``executing``.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from slotward.engine.rules.audit import verify_chain
from slotward.engine.usecases.executions import stored_key
from slotward.testing.history import check
from slotward.testing.recorded import Call, Snapshot, Violation
from tests.e2e.history_file import Recording, load

__all__ = ["main", "problems"]

EFFECTS = {  # op: (audit action, outbox event, the hold's status when it changed something)
    "create": ("hold.create", "hold.created", "held"),
    "commit": ("hold.commit", "hold.committed", "committed"),
    "release": ("hold.release", "hold.released", "released"),
}


def problems(recording: Recording) -> list[str]:
    """Every broken promise the recording shows, one line each (violations with the
    calls and rows they name)."""
    violations = check(recording.calls, recording.snapshot, recording.now)
    return [*explain(violations, recording.calls, recording.snapshot), *_effects(recording)]


def explain(
    violations: Sequence[Violation], calls: Sequence[Call], snapshot: Snapshot
) -> list[str]:
    """The violations, then every call and stored row they name."""
    if not violations:
        return []
    ids = {i for v in violations for i in v.ids}
    ids |= {k for k in map(stored_key, ids) if k}
    lines = [f"{v.rule}: {v.detail}" for v in violations]
    lines += [f"  call {c}" for c in calls if ids & _named(c)]
    lines += [f"  hold {h}" for h in snapshot.holds if ids & {h.id, h.key}]
    lines += [f"  record {r}" for r in snapshot.ledger if ids & {r.key, str(r.hold_id)}]
    return lines


def _named(call: Call) -> set[str]:
    return {str(x) for x in (call.key, call.target, call.document().get("id")) if x}


def _effects(recording: Recording) -> list[str]:
    snapshot, out = recording.snapshot, []
    stuck = [r for r in snapshot.ledger if r.kind == "hold" and r.state == "executing"]
    out += [f"hold record left executing: {r}" for r in stuck]
    events = Counter((r.tenant, r.type, r.hold_id) for r in recording.outbox)
    out += [f"outbox event {e} written {n} times" for e, n in events.items() if n > 1]
    audited = {(e.tenant, e.action, e.hold_id) for e in snapshot.audit if e.outcome == "fresh"}
    for call in (c for c in recording.calls if c.ok and c.op in EFFECTS):
        action, event, status = EFFECTS[call.op]
        said = call.document()
        if said.get("status") != status:
            continue  # a release of a hold that had expired or was preempted: no change
        if (call.tenant, event, str(said["id"])) not in events:
            out.append(f"no {event} event for {call}")
        if (call.tenant, action, str(said["id"])) not in audited:
            out.append(f"no fresh {action} audit entry for {call}")
    out += _execution_entries(recording)
    for tenant in sorted({c.tenant for c in recording.calls}):
        entries = [e for e in snapshot.audit if e.tenant == tenant]
        chain = verify_chain(entries)
        if not chain.ok or chain.count != len(entries) or not entries:
            out.append(f"audit chain of {tenant} ({len(entries)} entries): {chain}")
    return out


def _execution_entries(recording: Recording) -> list[str]:
    """Every lease granted (201) and every completion acknowledged (2xx, fresh or
    replayed) has its audit entry: at least as many ``execution.acquire``
    entries for a key as leases were granted on it (calls whose answer was lost
    may have added more), and an ``execution.complete`` with the outcome sent."""
    audit, out = recording.snapshot.audit, []
    acquired = Counter((e.tenant, e.key) for e in audit if e.action == "execution.acquire")
    completed = Counter(
        (e.tenant, e.key, e.outcome) for e in audit if e.action == "execution.complete"
    )
    granted = Counter(
        (c.tenant, stored_key(c.key or "")) for c in recording.calls
        if c.op == "acquire" and c.status == 201
    )  # fmt: skip
    for (tenant, key), n in sorted(granted.items(), key=str):
        if acquired[(tenant, key)] < n:
            out.append(f"{n} leases granted on {key} of {tenant}, but "
                       f"{acquired[(tenant, key)]} execution.acquire audit entries")  # fmt: skip
    # one entry per lease completed: replays of one completion share its token
    tokens: dict[tuple[str, str | None, Any], set[Any]] = {}
    for call in (c for c in recording.calls if c.op == "complete" and c.ok):
        done = (call.tenant, stored_key(call.key or ""), call.request.get("outcome"))
        tokens.setdefault(done, set()).add(call.request.get("lease_token"))
    for (tenant, key, outcome), leases in sorted(tokens.items(), key=str):
        if completed[(tenant, key, outcome)] < len(leases):
            out.append(f"{len(leases)} completions ({outcome}) of {key} of {tenant} "
                       f"acknowledged, but {completed[(tenant, key, outcome)]} "
                       "execution.complete audit entries")  # fmt: skip
    return out


def main(argv: Sequence[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tests.e2e.recheck FILE", file=sys.stderr)
        return 2
    recording = load(Path(argv[0]))
    found = problems(recording)
    print("\n".join(found) if found else "consistent", end="\n")
    run = {k: recording.run[k] for k in ("seed", "stage", "kills") if k in recording.run}
    print(f"({len(recording.calls)} calls, {len(recording.snapshot.holds)} holds, "
          f"{len(recording.snapshot.ledger)} ledger records, checked as of {recording.now}; "
          f"run {run})")  # fmt: skip
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
