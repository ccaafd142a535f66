"""Whose turn it is to write a SQLite file, among the processes sharing it.

SQLite serializes writers by the file's lock. A writer that finds it taken
waits in SQLite's busy handler, which sleeps and tries again 1, 2, 5, 10 ...
up to 100 ms apart: under steady contention (``serve --workers N`` on one
file) the writer that has waited longest sleeps longest, and the others take
the lock in between. Measured at 2 worker processes, a create's p99 was 2.0 s
for a p50 of 37 ms.

So each process's writer first takes an exclusive ``flock`` on a file
beside the database (``<database>-writer``) and holds it over its
transaction (the event loop's thread only if it is free at once, the writer
thread waiting for it: sqlite/loop_writer.py): the kernel wakes a waiter the
moment it is released, and drops the lock of a process that dies. It is only
a queue in front of SQLite's own lock, never what correctness rests on: a
writer that does not take it (a migration, the ``sqlite3`` shell) still
serializes by ``BEGIN IMMEDIATE``.

The wait has no timeout of its own: a process stopped in the middle of a
transaction holds SQLite's lock too, and the calls waiting behind it are
refused by the store's queue timeout (503) either way.
"""

from __future__ import annotations

import fcntl
import logging
import os
from pathlib import Path
from types import TracebackType

__all__ = ["WriterTurn", "turn_file"]

log = logging.getLogger("slotward.store")


def turn_file(database: Path) -> Path:
    """The file whose lock says which process writes ``database`` now."""
    return database.with_name(database.name + "-writer")


class WriterTurn:
    """Held by one writer thread over each transaction: ``with turn: ...``."""

    def __init__(self, database: Path) -> None:
        self._path = turn_file(database)
        self._fd: int | None = None
        self._pid = 0  # the process that opened _fd: a forked child opens its own
        self._unavailable = False  # the file cannot be made: SQLite's lock alone

    def __enter__(self) -> WriterTurn:
        fd = self._open()
        if fd is not None:
            fcntl.flock(fd, fcntl.LOCK_EX)
        return self

    def take_now(self) -> bool:
        """Take the turn if it is free now (then leave it by ``__exit__``); False if
        another holds it. Another ``WriterTurn`` of this process is another holder:
        each opens the file on its own, and ``flock`` locks an open file."""
        fd = self._open()
        if fd is None:
            return True
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        return True

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None and self._pid == os.getpid():
            os.close(fd)

    def _open(self) -> int | None:
        # A lock taken through an inherited descriptor would be the parent's
        # too (flock locks an open file, not a process): open our own.
        if self._fd is not None and self._pid == os.getpid():
            return self._fd
        if self._unavailable:
            return None
        try:
            self._fd = os.open(
                self._path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600
            )
        except OSError as exc:  # a read-only directory, say: as before this file existed
            log.warning("cannot open %s (%s): writers queue in SQLite's busy handler",
                        self._path, exc.strerror)  # fmt: skip
            self._fd, self._unavailable = None, True
            return None
        self._pid = os.getpid()
        return self._fd
