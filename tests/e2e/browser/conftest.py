"""A real chromium on the real dashboard of a real server (tests/e2e/conftest.py).

Every test gets a fresh browser and a fresh context (no cookie survives). When a
test fails, a screenshot, the page's HTML and its console are saved in the
test's own tmp folder, named at the end of the run. A page that logs a CSP
violation, throws, or opens a dialog fails the test that showed it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Generator
from pathlib import Path

import pytest
from playwright.async_api import (
    Browser,
    ConsoleMessage,
    Dialog,
    Error,
    Page,
    ViewportSize,
    async_playwright,
    expect,
)

from tests.e2e.browser.chromium import launch, require_chromium

# A bound on every wait for the page, never a pace: two cores shared with other
# work can take seconds to run a server, chromium and the test.
expect.set_options(timeout=20_000)
WAIT_MS = 20_000

_REPORTS = pytest.StashKey[dict[str, pytest.TestReport]]()
_SAVED = pytest.StashKey[list[Path]]()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Keep each phase's report on the item, for the page fixture to see a failure."""
    report = yield
    item.stash.setdefault(_REPORTS, {})[report.when] = report
    return report


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    saved = terminalreporter.config.stash.get(_SAVED, [])
    if saved:
        terminalreporter.section("browser failures: screenshot, page.html, console.log")
        for folder in saved:
            terminalreporter.write_line(str(folder))


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    require_chromium()
    async with async_playwright() as playwright:
        browser = await launch(playwright)
        try:
            yield browser
        finally:
            await browser.close()


@pytest.fixture
def viewport(request: pytest.FixtureRequest) -> ViewportSize:
    """1280x800, the laptop the dashboard is laid out for; a test may ask for another
    (``@pytest.mark.parametrize("viewport", [...], indirect=True)``)."""
    laptop: ViewportSize = {"width": 1280, "height": 800}
    size: ViewportSize = getattr(request, "param", laptop)
    return size


@pytest.fixture
async def page(
    browser: Browser, viewport: ViewportSize, request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[Page]:
    context = await browser.new_context(viewport=viewport, timezone_id="UTC", locale="en-GB")
    context.set_default_timeout(WAIT_MS)
    page = await context.new_page()
    console: list[str] = []
    problems: list[str] = []

    def on_console(message: ConsoleMessage) -> None:
        console.append(f"{message.type}: {message.text}")
        if "Content Security Policy" in message.text:
            problems.append(f"CSP violation: {message.text}")

    async def on_dialog(dialog: Dialog) -> None:
        problems.append(f"a dialog opened (injected script?): {dialog.message}")
        await dialog.dismiss()

    page.on("console", on_console)
    page.on("pageerror", lambda error: problems.append(f"uncaught: {error}"))
    page.on("dialog", on_dialog)
    try:
        yield page
    finally:
        reports = request.node.stash.get(_REPORTS, {})
        if problems or any(r.failed for r in reports.values()):
            await _save(page, console, problems, tmp_path / "browser", request.config)
        await context.close()
    assert not problems, problems


async def _save(
    page: Page, console: list[str], problems: list[str], folder: Path, config: pytest.Config
) -> None:
    files: dict[str, bytes] = {}
    try:
        files["screenshot.png"] = await page.screenshot(full_page=True)
        files["page.html"] = (await page.content()).encode()
    except Error as error:  # a crashed page: keep what there is
        problems.append(f"could not capture the page: {error}")
    files["console.log"] = ("\n".join([*problems, *console]) + "\n").encode()
    _write(folder, files)
    config.stash.setdefault(_SAVED, []).append(folder)


def _write(folder: Path, files: dict[str, bytes]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (folder / name).write_bytes(data)
