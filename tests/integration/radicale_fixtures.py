"""Fixtures of a real Radicale (tests/radicale.py) for the provider tests.

``radicale``: one server for the session, anyone let in; ``radicale_htpasswd``:
one that checks passwords (``RADICALE_USERS``); ``caldav_calendar``: a fresh,
empty calendar on ``radicale`` for each test. A test that stops or kills a
server starts its own (``start_radicale``), so the shared ones stay up.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.radicale import RadicaleServer, start_radicale

__all__ = ["RADICALE_USERS", "caldav_calendar", "radicale", "radicale_htpasswd"]

RADICALE_USERS = {"alice": "correct-horse-battery-staple", "bob": "hunter2-but-longer"}


@pytest.fixture(scope="session")
def radicale() -> Iterator[RadicaleServer]:
    with start_radicale() as server:
        yield server


@pytest.fixture(scope="session")
def radicale_htpasswd() -> Iterator[RadicaleServer]:
    with start_radicale("htpasswd", RADICALE_USERS) as server:
        yield server


@pytest.fixture
def caldav_calendar(radicale: RadicaleServer) -> str:
    """The URL of a new, empty calendar (with its trailing slash)."""
    if not radicale.running:  # a test that stopped the shared server left it down
        radicale.start()
    return radicale.calendar()
