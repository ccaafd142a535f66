"""The built wheel holds every module, as slotward.*, and nothing else at its top.

pyproject.toml discovers the packages through the slotward/ symlinks; a list
kept by hand once could leave a new subpackage out of the wheel silently, with
every test still passing against the source tree. So the wheel is built here,
with this venv's pip and setuptools (no build isolation, no index: no
network), from a copy of the tree: a ``build/`` left in the tree by an earlier
build would put its stale modules in the wheel and hide a missing one.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGED = ("engine", "adapters", "api", "testing", "benchmarks")
_NOT_SOURCE = shutil.ignore_patterns(
    ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".*_cache", ".hypothesis",
    "*.db", "*.db-*",
)  # fmt: skip


def _built(tmp_path: Path) -> tuple[Path, list[str]]:
    """The copied tree and the names in the wheel built from it."""
    tree = tmp_path / "tree"
    shutil.copytree(ROOT, tree, symlinks=True, ignore=_NOT_SOURCE)
    out = tmp_path / "wheel"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index",
         "--no-cache-dir", "--quiet", "--wheel-dir", str(out), str(tree)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    (wheel,) = out.glob("slotward-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        return tree, archive.namelist()


def test_the_wheel_holds_every_module_and_its_data_under_slotward(tmp_path: Path) -> None:
    tree, names = _built(tmp_path)
    expected = {
        f"slotward/{path.relative_to(tree).as_posix()}"
        for folder in PACKAGED
        for path in (tree / folder).rglob("*")
        if path.is_file()
    }
    assert len([n for n in expected if n.endswith(".py")]) > 100  # the copy is the whole tree
    assert {"slotward/__init__.py", "slotward/py.typed"} | expected <= set(names), sorted(
        expected - set(names)
    )
    assert "slotward/adapters/store/migrations/script.py.mako" in names
    web = {n for n in names if n.startswith("slotward/api/web/")}
    assert "slotward/api/web/index.html" in web  # the dashboard, served from the package
    assert web == {f"slotward/api/{p.relative_to(tree / 'api').as_posix()}"
                   for p in (tree / "api" / "web").iterdir()}  # fmt: skip
    tops = {name.split("/")[0] for name in names}
    assert {top for top in tops if not top.endswith(".dist-info")} == {"slotward"}
    assert not [n for n in names if n.startswith(("slotward/tests/", "tests/"))]
