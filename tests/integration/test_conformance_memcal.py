"""The conformance kit against the memcal plugin (tests/fixtures/slotward-memcal), installed
with pip and loaded through its entry point, as a third-party adapter is."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from slotward.adapters.providers.registry import load_providers
from slotward.engine.calendars import ProviderSettings
from slotward.engine.provider_ports import CalendarProvider
from slotward.testing.providers import ProviderConformance
from tests.integration.harnesses import DirectoryHarness
from tests.plugins import install_fixture_package


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return install_fixture_package("slotward-memcal", tmp_path_factory.mktemp("plugins"))


async def loaded(name: str, settings: ProviderSettings) -> CalendarProvider:
    """The provider ``name`` from the registry; the others it built are closed."""
    providers = load_providers(settings)
    for other, provider in providers.items():
        if other != name:
            await provider.close()
    return providers[name]


class TestMemcal(ProviderConformance):
    @pytest.fixture
    async def provider(
        self, installed: Path, monkeypatch: pytest.MonkeyPatch
    ) -> AsyncIterator[CalendarProvider]:
        monkeypatch.syspath_prepend(str(installed))
        provider = await loaded("memcal", ProviderSettings())
        yield provider
        await provider.close()

    @pytest.fixture
    def harness(self, tmp_path: Path) -> DirectoryHarness:
        return DirectoryHarness(tmp_path / "calendar")
