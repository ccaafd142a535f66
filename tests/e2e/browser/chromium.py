"""Debian's chromium, driven by Playwright for Python.

Playwright cannot download its own browsers here, so it is pointed at the
system's (`make test` installs it). The flags keep it quiet on a closed network:
without the background-networking ones chromium keeps trying to reach Google's
services and logs every refusal.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from playwright.async_api import Browser, Playwright

__all__ = ["ARGS", "CHROMIUM", "launch", "missing", "require_chromium"]

CHROMIUM = Path("/usr/bin/chromium")
ARGS = (
    "--no-sandbox",  # root in CI, and no user namespaces in containers
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


def missing() -> str | None:
    """Why chromium cannot be driven here, or None when it can."""
    if os.access(CHROMIUM, os.X_OK):
        return None
    return f"{CHROMIUM} is missing: `make test` installs it (apt-get install chromium)"


def require_chromium() -> None:
    """Skip without chromium on a laptop; fail on CI (CI=true), where `make test` installs it."""
    hint = missing()
    if hint is None:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true but {hint}")
    pytest.skip(hint)


async def launch(playwright: Playwright) -> Browser:
    """A headless chromium with a new, empty profile (Playwright makes one per launch)."""
    return await playwright.chromium.launch(
        executable_path=str(CHROMIUM), headless=True, args=list(ARGS)
    )
