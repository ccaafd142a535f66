"""Only the conformance kit needs pytest: an installed slotward (no dev extra) imports
every other module without it, slotward.testing included."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KIT = ROOT / "testing" / "providers.py"
TEST_LIBRARIES = ("pytest", "pytest_asyncio", "_pytest", "hypothesis")


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_nothing_shipped_but_the_kit_imports_pytest() -> None:
    shipped = [p for d in ("engine", "adapters", "api", "testing", "benchmarks")
               for p in sorted((ROOT / d).rglob("*.py"))]  # fmt: skip
    users = {str(p.relative_to(ROOT)) for p in shipped if _imports(p) & set(TEST_LIBRARIES)}
    assert users == {"testing/providers.py"}


def test_slotward_testing_and_the_registry_load_without_pytest() -> None:
    shown = (
        "import sys; sys.modules['pytest'] = None; "  # an import of pytest now fails
        "import slotward.testing, slotward.testing.provider_cases, "
        "slotward.adapters.providers.registry, slotward.api.cli.providers; print('ok')"
    )
    run = subprocess.run([sys.executable, "-c", shown], capture_output=True, text=True, check=False)
    assert run.stdout.strip() == "ok", run.stderr
