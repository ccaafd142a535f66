"""WAL checkpoints on a thread of their own, never in a write's way.

By default SQLite checkpoints from the connection whose COMMIT pushes the WAL
past 1000 pages: that commit then copies the pages back into the database
file and syncs it before it returns. On SQLite's one writer thread every call
waiting behind it waited too: with a large database (pages scattered on disk)
claims stalled 60-270 ms every second or so (``slotward bench scale``). So the
store's connections never checkpoint (``wal_autocheckpoint=0``) and this
thread runs a PASSIVE checkpoint, which never blocks writers or readers, every
``interval`` seconds on its own connection. A checkpoint another process runs
at the same time makes this one a no-op (SQLITE_BUSY), which is fine.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["Checkpointer"]

log = logging.getLogger("slotward.store")


class Checkpointer:
    def __init__(self, connect: Callable[[], Any], interval: float = 0.5) -> None:
        """``connect`` opens a DB-API connection of the store's (closed on ``close``)."""
        self._connect = connect
        self._interval = interval
        self._stop = threading.Event()
        self.checkpoints = 0  # completed runs, for tests
        self._thread = threading.Thread(target=self._loop, name="slotward-checkpoint", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        conn = self._connect()
        try:
            while not self._stop.wait(self._interval):
                self.run_once(conn)
        finally:
            conn.close()

    def run_once(self, conn: Any) -> None:
        try:
            cursor = conn.cursor()
            cursor.execute("PRAGMA wal_checkpoint(PASSIVE)")
            cursor.fetchall()
            cursor.close()
            self.checkpoints += 1
        except sqlite3.Error as exc:  # busy, or the disk: the next run tries again
            log.warning("WAL checkpoint failed: %s", exc)

    def run_now(self) -> None:
        """One checkpoint on a connection of its own, from the caller's thread."""
        conn = self._connect()
        try:
            self.run_once(conn)
        finally:
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
