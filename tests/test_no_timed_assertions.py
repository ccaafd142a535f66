"""A ratchet: no test asserts how long something took.

Performance is measured by `slotward bench` against a baseline of the same run;
on a shared machine a timed assertion is a flaky test (one failed at 10.6 s
against its 10 s). A bounded wait (``while time.monotonic() < deadline``) is
fine: it only stops a test that would hang. What is refused is an ``assert``
whose comparison holds an elapsed time: a clock reading minus something.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent
_CLOCKS = {"perf_counter", "monotonic", "time", "perf_counter_ns", "monotonic_ns"}


def _is_clock_call(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in _CLOCKS
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id in ("time", "loop")
    )


def timed_assertions(source: str) -> list[int]:
    """Lines of the ``assert`` statements that compare an elapsed time."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Assert):
            continue
        for inner in ast.walk(node.test):
            if (
                isinstance(inner, ast.BinOp)
                and isinstance(inner.op, ast.Sub)
                and _is_clock_call(inner.left)
            ):
                found.append(node.lineno)
                break
    return found


def test_no_test_asserts_an_elapsed_time() -> None:
    found = {
        str(path.relative_to(ROOT)): lines
        for path in sorted(ROOT.rglob("*.py"))
        if (lines := timed_assertions(path.read_text()))
    }
    assert not found, f"timed assertions (measure with slotward bench instead): {found}"


def test_the_ratchet_catches_a_timed_assertion_and_spares_a_bounded_wait() -> None:
    planted = (
        "import time\n"
        "started = time.perf_counter()\n"
        "assert time.perf_counter() - started < 0.5\n"
        "deadline = time.monotonic() + 30\n"
        "while time.monotonic() < deadline:\n"
        "    assert time.monotonic() < deadline, 'not ready'\n"
        "assert (time.monotonic() - started) * 1000 <= 5\n"
    )
    assert timed_assertions(planted) == [3, 7]
