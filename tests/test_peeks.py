"""What runs as a peek is a read of a few key-bounded lookups: a ratchet.

A peek (adapters/store/sqlite/store.py ``SqliteStore.peek``) runs its read on
the event loop's own thread, blocking every other request while it runs: fine
for a lookup by key, a stall for anything that scans. Each read passed to
``peek`` is listed here, with the statements tests/integration/test_query_plans.py
holds to their index; a new peek is a decision to list here, not an accident.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# The use case each peek runs (as written at the call), and why it is key-bounded.
ALLOWED = {
    "look": "placing.lookup_replay: the record by key, the intent's live hold",
    "replay_known": "known_replays.replay_known: Ledger.replay_state, one statement",
    "reads.get_hold": "a hold by its primary key",
    "approvals.get_approval": "an approval by its primary key",
    "executions.get_execution": "a ledger record by its primary key",
}

# The peeks run ``alone`` (one statement, no transaction around it:
# adapters/store/sqlite/peeks.py), each with the test that pins its one statement.
# One that is not one statement runs its first statement twice: a cost, not a
# fault, so only a list makes it a decision.
ALONE = {
    "replay_known": "tests/e2e/test_known_replay_cost.py, tests/integration/test_sqlite_peeks.py",
    "reads.get_hold": "tests/integration/test_sqlite_peeks.py",
}


def _peeked(call: ast.Call) -> str:
    """The name of the read a ``peek(...)`` call runs: its argument, or partial's first."""
    arg = call.args[0]
    if isinstance(arg, ast.Call) and ast.unparse(arg.func) == "partial":
        arg = arg.args[0]
    return ast.unparse(arg)


def _peek_calls() -> list[tuple[ast.Call, str]]:
    found: list[tuple[ast.Call, str]] = []
    for path in sorted((ROOT / "api").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "peek"
                and ast.unparse(node.func.value) == "svc"
            ):
                found.append((node, f"{path.relative_to(ROOT)}:{node.lineno}"))
    return found


def _peeks() -> dict[str, str]:
    return {_peeked(call): where for call, where in _peek_calls()}


def _alone(call: ast.Call) -> bool:
    return any(k.arg == "alone" and ast.unparse(k.value) != "False" for k in call.keywords)


def test_every_peek_runs_a_listed_key_bounded_read() -> None:
    found = _peeks()
    unlisted = {name: where for name, where in found.items() if name not in ALLOWED}
    assert not unlisted, f"a peek blocks the event loop; list it if key-bounded: {unlisted}"
    assert set(found) == set(ALLOWED), "a listed peek is gone: take it off the list"


def test_every_peek_run_alone_is_listed_with_its_test() -> None:
    alone = {_peeked(call): where for call, where in _peek_calls() if _alone(call)}
    unlisted = {name: where for name, where in alone.items() if name not in ALONE}
    assert not unlisted, (
        f"a peek run alone must be one statement; list it with its test: {unlisted}"
    )
    assert set(alone) == set(ALONE), "a listed peek no longer runs alone: take it off the list"
