"""The edge's descriptor guards: a cap that fits the limit, accept failures as one warning."""

from __future__ import annotations

import asyncio
import errno
import logging
import resource

import pytest

from slotward.api.config import Config
from slotward.api.http.fdlimit import RESERVED_FILES, fit_connections, quiet_accept_errors


async def test_a_flood_of_accept_failures_is_one_warning_not_a_traceback_each(
    caplog: pytest.LogCaptureFixture,
) -> None:
    loop = asyncio.get_running_loop()
    quiet_accept_errors(loop)
    try:
        with caplog.at_level(logging.WARNING):
            for _ in range(100):  # what asyncio reports when accept() finds no descriptor
                loop.call_exception_handler({
                    "message": "socket.accept() out of system resource",
                    "exception": OSError(errno.EMFILE, "Too many open files"),
                })  # fmt: skip
            loop.call_exception_handler({"message": "something else entirely"})
        mine = [r for r in caplog.records if r.name == "slotward.edge"]
        assert [r.levelno for r in mine] == [logging.WARNING]
        assert mine[0].exc_info is None  # no traceback
        others = [r for r in caplog.records if r.name == "asyncio"]
        assert [r.getMessage() for r in others] == ["something else entirely"]  # untouched
    finally:
        loop.set_exception_handler(None)


def test_a_cap_that_fits_the_limit_is_kept() -> None:
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < 2 * RESERVED_FILES:
        pytest.skip("this process's own limit is too low to try")
    small = Config(max_connections=8)
    assert fit_connections(small) == small
