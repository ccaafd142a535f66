"""``slotward providers list``, run as a user runs it: the built-ins, an installed
plugin found through its entry point, and broken plugins named on stderr while
the listing goes on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.plugins import install_fixture_package

SLOTWARD = [sys.executable, "-m", "slotward.api.cli.main"]
COLUMNS = ["name", "source", "writes", "credentials", "incremental", "schemes", "description"]


def _run(*args: str, path: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if path is not None:
        env["PYTHONPATH"] = str(path)
    return subprocess.run(
        [*SLOTWARD, *args], capture_output=True, text=True, env=env, timeout=60, check=False
    )


@pytest.fixture(scope="module")
def plugins(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("site")
    install_fixture_package("slotward-memcal", target)
    return install_fixture_package("slotward-brokencal", target)


def _rows(run: subprocess.CompletedProcess[str]) -> dict[str, dict[str, Any]]:
    assert run.returncode == 0, run.stderr
    listed = json.loads(run.stdout)
    assert isinstance(listed, list)
    assert all(list(row) == COLUMNS for row in listed), listed
    return {row["name"]: row for row in listed}


def test_the_builtins_are_listed_as_json() -> None:
    rows = _rows(_run("providers", "list", "--json"))
    assert set(rows) == {"caldav", "ics"}
    assert {row["source"] for row in rows.values()} == {"builtin"}
    assert rows["caldav"]["writes"] is True
    assert rows["caldav"]["credentials"] is True
    assert rows["ics"]["writes"] is False
    assert "file" in rows["ics"]["schemes"]
    assert "https" in rows["caldav"]["schemes"]


def test_the_table_has_a_row_per_provider_under_its_header() -> None:
    run = _run("providers", "list")
    assert run.returncode == 0, run.stderr
    header, *lines = run.stdout.splitlines()
    assert header.split() == COLUMNS
    assert sorted(line.split()[:2] for line in lines) == [["caldav", "builtin"], ["ics", "builtin"]]
    caldav = next(line for line in lines if line.startswith("caldav"))
    assert caldav.split()[2:4] == ["yes", "yes"]  # writes, takes credentials
    assert caldav.split()[4] in ("yes", "no")
    assert run.stderr == ""  # nothing left out


def test_an_installed_plugin_is_listed_and_broken_ones_are_named_on_stderr(plugins: Path) -> None:
    rows = _rows(_run("providers", "list", "--json", path=plugins))
    assert set(rows) == {"caldav", "ics", "memcal"}
    assert rows["memcal"] == {
        "name": "memcal",
        "source": "slotward-memcal 0.1.0",
        "writes": True,
        "credentials": False,
        "incremental": True,
        "schemes": ["file"],
        "description": "a directory of .ics files, one per event",
    }
    assert rows["ics"]["source"] == "builtin"  # slotward-brokencal's "ics" shadows nothing
    table = _run("providers", "list", path=plugins)
    memcal = next(line for line in table.stdout.splitlines() if line.startswith("memcal"))
    assert memcal.split()[:6] == ["memcal", "slotward-memcal", "0.1.0", "yes", "no", "yes"]
    left_out = [json.loads(line) for line in table.stderr.splitlines()]
    assert sorted(line["provider"] for line in left_out) == [
        "Bad_Name", "brokencal", "ics", "missingcal", "notaprovider",
    ]  # fmt: skip
    assert {line["logger"] for line in left_out} == {"slotward.providers"}
    assert all("Traceback" not in line["msg"] and "exc" not in line for line in left_out)


def test_providers_wants_a_subcommand() -> None:
    run = _run("providers")
    assert run.returncode == 2
    assert "list" in run.stderr
