"""docs/architecture.md stays true: every hop it names exists, and there are at most 15."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "architecture.md"
HOP = re.compile(r"^\| (\d+) \| ([\w/]+\.py):([\w.]+) \|", re.M)


def _defined(path: Path) -> set[str]:
    """Dotted names of the functions and classes in ``path`` (``Class.method``)."""
    names: set[str] = set()

    def visit(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = f"{prefix}{child.name}"
                names.add(name)
                visit(child, f"{name}.")

    visit(ast.parse(path.read_text()), "")
    return names


def unknown_hops(text: str) -> list[str]:
    return [
        f"{file}:{name}"
        for _, file, name in HOP.findall(text)
        if not (ROOT / file).is_file() or name not in _defined(ROOT / file)
    ]


def test_every_hop_of_the_walk_exists() -> None:
    text = DOC.read_text()
    hops = HOP.findall(text)
    assert hops, "no hop table found"
    assert [int(n) for n, _, _ in hops] == list(range(1, len(hops) + 1))
    assert len(hops) <= 15
    assert unknown_hops(text) == []


def test_a_renamed_function_is_caught() -> None:
    planted = "| 1 | api/holds.py:create_hold | x |\n| 2 | api/holds.py:place_it | y |\n"
    assert unknown_hops(planted) == ["api/holds.py:place_it"]
    assert unknown_hops("| 1 | api/nowhere.py:f | z |\n") == ["api/nowhere.py:f"]
