"""Installing the test fixtures' plugin packages (tests/fixtures/slotward-*) the way a
user installs a third-party adapter: ``pip install`` of a real package, found by
slotward through its entry point (group ``slotward.providers``).

Offline: this venv's pip and setuptools build it (no build isolation, no index),
from a copy, so no ``build/`` or ``*.egg-info`` is left in tests/fixtures.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = ["FIXTURES", "install_fixture_package"]

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def install_fixture_package(name: str, target: Path) -> Path:
    """Install tests/fixtures/``name`` (``"slotward-memcal"``) into the folder
    ``target`` and return it: put it on ``sys.path`` or ``PYTHONPATH`` and
    slotward finds the plugin."""
    source = FIXTURES / name
    if not (source / "pyproject.toml").is_file():
        raise ValueError(f"no fixture package {name!r} in {FIXTURES}")
    target.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="slotward-plugin-") as scratch:
        copy = Path(scratch) / name
        shutil.copytree(source, copy, ignore=shutil.ignore_patterns("__pycache__", "build"))
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation",
             "--no-index", "--no-cache-dir", "--quiet", "--disable-pip-version-check",
             "--target", str(target), str(copy)],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
    return target
