"""Fixtures shared by the integration tests."""

from tests.integration.radicale_fixtures import (  # noqa: F401  (fixtures, found by name)
    caldav_calendar,
    radicale,
    radicale_htpasswd,
)
