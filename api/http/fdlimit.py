"""The connection cap must fit the process's open-files limit.

A connection is a file descriptor. With the cap at or above ``RLIMIT_NOFILE``
(1024 by default on Linux, the cap's own default), slow clients exhaust the
descriptors before the cap refuses any: ``accept()`` then fails, asyncio logs
a traceback per attempt, and the store cannot open a file or a connection.
At start the soft limit is raised toward the hard one as far as the cap needs;
where the hard limit is too low, the cap is lowered to fit, with a warning.

Refused connections are accepted before they are refused, and asyncio accepts
a burst of them per turn of the loop before any is closed, so a flood can
still run out of descriptors for a moment. asyncio then pauses accepting for
a second and reports the error once per connection it could not accept, with
a traceback each; :func:`quiet_accept_errors` turns that into one warning a
second.
"""

from __future__ import annotations

import asyncio
import logging
import resource
from dataclasses import replace
from typing import Any

from slotward.api.config import Config
from slotward.api.logs import Throttled

__all__ = ["RESERVED_FILES", "fit_connections", "quiet_accept_errors"]

log = logging.getLogger("slotward.edge")

# Descriptors kept for everything but the connections the cap admits: the
# store's files or pooled connections, the completion listener, the listening
# socket and logs (128), and one burst of accepts: asyncio accepts up to the
# listen backlog (aiohttp's 128) in one go, before the refused ones among them
# are closed on the next turn of the loop (128).
RESERVED_FILES = 256


def fit_connections(config: Config) -> Config:
    """``config`` with a connection cap this process can hold open."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = config.max_connections + RESERVED_FILES
    if soft != resource.RLIM_INFINITY and soft < want:
        raised = want if hard == resource.RLIM_INFINITY else min(want, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
            soft = raised
        except (ValueError, OSError):
            pass  # keep the soft limit; the cap is fitted to it below
    if soft == resource.RLIM_INFINITY or soft >= want:
        return config
    cap = max(1, soft - RESERVED_FILES)
    log.warning(
        "the open-files limit is %d: serving at most %d connections, not %d",
        soft, cap, config.max_connections,
        extra={"open_files_limit": soft, "max_connections": cap},
    )  # fmt: skip
    return replace(config, max_connections=cap)


_OUT_OF_RESOURCE = "socket.accept() out of system resource"  # asyncio's own words


def quiet_accept_errors(loop: asyncio.AbstractEventLoop) -> None:
    """Report the loop's accept() failures for want of descriptors as a warning a second."""
    said = Throttled(log)

    def handle(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if context.get("message") != _OUT_OF_RESOURCE:
            loop.default_exception_handler(context)
            return
        said.warning(
            "out of file descriptors: not accepting connections for a second "
            f"({type(context.get('exception')).__name__})",
            "out of file descriptors: %d more connections waited (accepting resumes "
            "within a second)",
            {"accept_failures": 1},
        )

    loop.set_exception_handler(handle)
