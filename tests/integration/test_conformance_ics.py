"""The conformance kit against the built-in ``ics`` adapter over a ``file://`` calendar:
one .ics file, rewritten behind its back as a calendar app exporting it would.
The adapter is read-only, so the kit's write tests skip."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from slotward.adapters.providers.registry import load_providers
from slotward.engine.calendars import ProviderSettings
from slotward.engine.provider_ports import CalendarProvider
from slotward.testing.providers import ProviderConformance
from tests.integration.harnesses import IcsFileHarness


class TestIcsFile(ProviderConformance):
    @pytest.fixture
    async def provider(self) -> AsyncIterator[CalendarProvider]:
        # file:// URLs are read only where private URLs are allowed (adapters/providers/ics.py).
        providers = load_providers(ProviderSettings(allow_private_urls=True))
        try:
            yield providers["ics"]
        finally:
            for provider in providers.values():
                await provider.close()

    @pytest.fixture
    def harness(self, tmp_path: Path) -> IcsFileHarness:
        return IcsFileHarness(tmp_path / "calendar.ics")
