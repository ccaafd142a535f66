"""Third-party calendar adapters: installed with pip like any package, found through
their entry point (group ``slotward.providers``), and a broken one never takes
slotward down: it is left out, with one log line saying why.

The fixture packages (tests/fixtures) are built and installed offline into a folder
of their own; importlib.metadata reads their dist-info from ``sys.path``.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from slotward.adapters.providers.registry import BUILTIN_SOURCE, discover, load_providers
from slotward.engine.calendars import (
    CalendarEvent,
    Capabilities,
    ProviderSettings,
    Window,
)
from slotward.engine.rules.calendar_events import event_uid
from tests.integration.harnesses import DirectoryHarness
from tests.plugins import install_fixture_package

# slotward-brokencal's entry points, and why each is left out.
BROKEN = {
    "brokencal": "its factory raised RuntimeError: brokencal cannot start: no licence file",
    "notaprovider": "its factory returned no CalendarProvider",
    "missingcal": "it does not import: ModuleNotFoundError",
    "Bad_Name": "its name does not match",
    "ics": "it would shadow the built-in provider 'ics'",
}


@pytest.fixture(scope="module")
def plugins(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("site")
    install_fixture_package("slotward-memcal", target)
    return install_fixture_package("slotward-brokencal", target)


@pytest.fixture
def on_path(plugins: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.syspath_prepend(str(plugins))
    return plugins


def test_an_installed_plugin_is_found_through_its_entry_point(on_path: Path) -> None:
    found = {info.name: info for info in discover()}
    memcal = found["memcal"]
    assert memcal.source == "slotward-memcal 0.1.0"
    assert memcal.capabilities == Capabilities(
        writes=True, credentials=False, incremental=True, schemes=("file",),
        description="a directory of .ics files, one per event",
    )  # fmt: skip
    assert {name for name, info in found.items() if info.source == BUILTIN_SOURCE} <= {
        "caldav",
        "ics",
    }


def test_without_the_package_on_the_path_there_is_no_plugin() -> None:
    assert "memcal" not in {info.name for info in discover()}


def test_broken_plugins_are_left_out_with_a_log_line_each(
    on_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="slotward.providers")
    found = {info.name: info for info in discover()}
    assert "memcal" in found  # the good plugin beside them still loads
    assert not {"brokencal", "notaprovider", "missingcal", "Bad_Name"} & set(found)
    if "ics" in found:
        assert found["ics"].source == BUILTIN_SOURCE  # not the impostor
    lines = [r for r in caplog.records if r.name == "slotward.providers"]
    for name, why in BROKEN.items():
        said = [r.getMessage() for r in lines if getattr(r, "provider", None) == name
                and "slotward-brokencal 0.2.0" in r.getMessage()]  # fmt: skip
        assert len(said) == 1, (name, [r.getMessage() for r in lines])
        assert why in said[0], said[0]
    assert not [r for r in lines if r.exc_info or r.stack_info], "a traceback was logged"


async def test_the_loaded_plugin_writes_and_reads_its_calendar(
    on_path: Path, tmp_path: Path
) -> None:
    providers = load_providers(ProviderSettings())
    try:
        memcal = providers["memcal"]
        calendar = DirectoryHarness(tmp_path)
        conn = calendar.connection
        event = CalendarEvent(
            uid=event_uid("hold_plugin1"), start=_at(9), end=_at(10), summary="Held",
            description="by the test", status="TENTATIVE", sequence=1,
        )  # fmt: skip
        assert (await memcal.put_event(conn, event)).ok
        assert await calendar.events() == [(event.uid, "TENTATIVE")]
        read = await memcal.busy(conn, Window(_at(0), _at(23)), None)
        assert [(b.uid, b.start, b.end) for b in read.busy] == [(event.uid, _at(9), _at(10))]
    finally:
        for provider in providers.values():
            await provider.close()


def _at(hour: int) -> datetime:
    return datetime(2030, 6, 3, hour, tzinfo=UTC)


def test_slotward_providers_list_lists_the_plugin(plugins: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(plugins)}
    run = subprocess.run(
        [sys.executable, "-m", "slotward.api.cli.main", "providers", "list", "--json"],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    rows = {row["name"]: row for row in json.loads(run.stdout)}
    assert rows["memcal"]["source"] == "slotward-memcal 0.1.0"
    assert rows["memcal"]["schemes"] == ["file"]
    assert "brokencal" not in rows
    assert "'brokencal' (slotward-brokencal 0.2.0) left out" in run.stderr
    assert "no licence file" in run.stderr


async def test_discover_works_from_within_a_running_loop(on_path: Path) -> None:
    """The server describes its providers from async code: the providers built only to
    be described are closed on a loop of their own."""
    assert "memcal" in {info.name for info in discover()}
