"""The dashboard as a person uses it: a driver for one browser tab."""

from __future__ import annotations

from playwright.async_api import Locator, Page, expect

from tests.e2e.conftest import Client

__all__ = ["DAY", "Dashboard"]

DAY = "2030-10-14"  # the day the tests book (the server's clock starts on 2030-10-01)


class Dashboard:
    """One tab on ``base``'s /dashboard."""

    def __init__(self, page: Page, base: str) -> None:
        self.page = page
        self.base = base

    async def open(self, fragment: str = f"view=day&date={DAY}") -> None:
        await self.page.goto(f"{self.base}/dashboard#{fragment}")
        await expect(self.page.locator("#signin:not([hidden]), #app:not([hidden])")).to_be_visible()

    async def sign_in(self, key: Client) -> None:
        """Type the key and press Enter, as a person would."""
        assert key.secret is not None
        await self.page.locator("#signin-key").fill(key.secret)
        await self.page.locator("#signin-key").press("Enter")

    async def signed_in(self, key: Client) -> None:
        """Open, sign in, and wait until the live stream is up."""
        await self.open()
        await self.sign_in(key)
        await expect(self.page.locator("#app")).to_be_visible()
        await expect(self.live).to_have_attribute("data-state", "live")

    @property
    def live(self) -> Locator:
        return self.page.locator("#live")

    @property
    def signin_error(self) -> Locator:
        return self.page.locator("#signin-error")

    def hold(self, hold_id: str) -> Locator:
        """The hold's block in its first attendee's row (each row shows it)."""
        return self.page.locator(f'#timeline-grid .hold[data-hold-id="{hold_id}"]').first

    def approval(self, approval_id: str) -> Locator:
        return self.page.locator(f'#approvals-list .approval[data-id="{approval_id}"]')

    async def mark(self) -> None:
        """Mark the document: a reload would lose it (see ``unreloaded``)."""
        await self.page.evaluate("window.__notReloaded = true")

    async def unreloaded(self) -> bool:
        return bool(await self.page.evaluate("window.__notReloaded === true"))
