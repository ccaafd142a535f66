"""The connection cap must fit the process's open-files limit.

A connection is a file descriptor. With the cap at or above ``RLIMIT_NOFILE``
(1024 by default on Linux, the cap's own default), slow clients exhaust the
descriptors before the cap refuses any: ``accept()`` then fails, asyncio logs
a traceback per attempt, and the store cannot open a file or a connection.
At start the soft limit is raised toward the hard one as far as the cap needs;
where the hard limit is too low, the cap is lowered to fit, with a warning.
"""

from __future__ import annotations

import logging
import resource
from dataclasses import replace

from slotward.api.config import Config

__all__ = ["RESERVED_FILES", "fit_connections"]

log = logging.getLogger("slotward.edge")

# Descriptors kept for everything but client connections: the store's files or
# pooled connections, the completion listener, the listening socket, logs.
RESERVED_FILES = 128


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
