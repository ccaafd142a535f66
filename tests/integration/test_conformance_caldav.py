"""The conformance kit against the built-in ``caldav`` adapter on a real Radicale that
checks passwords (tests/radicale.py): a fresh calendar per test, events put into it
behind slotward's back over plain HTTP, as another calendar client would."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from slotward.adapters.providers.registry import load_providers
from slotward.engine.calendars import ProviderSettings
from slotward.engine.provider_ports import CalendarProvider
from slotward.testing.providers import ProviderConformance
from tests.integration.harnesses import CalDavHarness
from tests.radicale import RadicaleServer


class TestCalDavOnRadicale(ProviderConformance):
    @pytest.fixture
    async def provider(self) -> AsyncIterator[CalendarProvider]:
        # Radicale listens on loopback: a private address the SSRF guard lets through
        # only when allowed (SLOTWARD_ALLOW_PRIVATE_URLS).
        providers = load_providers(ProviderSettings(allow_private_urls=True))
        try:
            yield providers["caldav"]
        finally:
            for provider in providers.values():
                await provider.close()

    @pytest.fixture
    def harness(self, radicale_htpasswd: RadicaleServer) -> CalDavHarness:
        if not radicale_htpasswd.running:
            radicale_htpasswd.start()
        return CalDavHarness(radicale_htpasswd, "alice")
