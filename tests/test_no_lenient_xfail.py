"""A ratchet: no expected failure may pass quietly.

An ``xfail`` that is not strict passes whether the test fails or not: a test
that cannot fail. pyproject.toml makes every ``xfail`` strict; this refuses a
marker that turns it back off (one such was written, then removed, for a plan
PostgreSQL chooses either way: docs/concurrency.md "Plans").
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent


def lenient_xfails(source: str) -> list[int]:
    """Lines of the ``xfail`` markers given ``strict=False``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        if node.func.attr != "xfail":
            continue
        for keyword in node.keywords:
            value = keyword.value
            if keyword.arg == "strict" and not (
                isinstance(value, ast.Constant) and value.value is True
            ):
                found.append(node.lineno)
    return found


def test_the_check_finds_a_lenient_xfail() -> None:
    source = "import pytest\n\n@pytest.mark.xfail(reason='x', strict=False)\ndef test_a(): ...\n"
    assert lenient_xfails(source) == [3]
    assert lenient_xfails(source.replace("strict=False", "strict=True")) == []


def test_no_test_marks_an_expected_failure_lenient() -> None:
    found = {
        str(path.relative_to(ROOT)): lines
        for path in sorted(ROOT.rglob("*.py"))
        if (lines := lenient_xfails(path.read_text(encoding="utf-8")))
    }
    assert found == {}
