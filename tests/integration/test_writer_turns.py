"""Processes sharing a SQLite file take turns to write by a lock file
(adapters/store/sqlite/turns.py), not by SQLite's sleeping busy handler.

Each test fails if the turn is not taken: a write that should wait would run
at once, and a forked process would share its parent's lock.
"""

from __future__ import annotations

import asyncio
import fcntl
import os
import select
import sys
from pathlib import Path

from slotward.adapters.store.sqlite.store import SqliteStore
from slotward.adapters.store.sqlite.turns import WriterTurn, turn_file
from slotward.engine.ports import UnitOfWork

EVENT_WAIT = 30.0  # a guard against a hang, never a timing assertion
STILL = 0.3  # how long a blocked write is watched not to run


def _taken(database: Path) -> bool:
    """Whether some open file holds the turn of ``database`` now."""
    fd = os.open(turn_file(database), os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing drops a lock this took
    return False


def _note(uow: UnitOfWork, seen: list[str]) -> None:
    with uow:
        uow.commit()
    seen.append("ran")


async def test_a_write_holds_the_turn_over_its_transaction(
    sqlite_store: SqliteStore, sqlite_file: Path
) -> None:
    database = sqlite_file

    def look(uow: UnitOfWork) -> bool:
        with uow:
            uow.commit()
        return _taken(database)

    assert await sqlite_store.write(look) is True
    assert _taken(database) is False  # given back before the answer


async def test_a_write_waits_for_another_process_turn_until_it_ends(
    sqlite_store: SqliteStore, sqlite_file: Path
) -> None:
    holder = await asyncio.create_subprocess_exec(
        sys.executable, "-c", _HOLD, str(turn_file(sqlite_file)),
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    try:
        assert holder.stdout is not None
        assert await asyncio.wait_for(holder.stdout.readline(), EVENT_WAIT) == b"held\n"
        seen: list[str] = []
        write = asyncio.ensure_future(sqlite_store.write(lambda uow: _note(uow, seen)))
        await asyncio.sleep(STILL)
        assert not write.done()  # waiting its turn ...
        assert seen == []  # ... not run
        holder.kill()  # the kernel drops a dead process's lock
        await asyncio.wait_for(write, EVENT_WAIT)
        assert seen == ["ran"]
    finally:
        if holder.returncode is None:
            holder.kill()
        await holder.wait()


_HOLD = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.read()
"""


def test_a_forked_process_takes_its_own_turn(tmp_path: Path) -> None:
    # flock locks an open file: a child writing through its parent's descriptor
    # would hold the parent's lock, and both would write at once.
    turn = WriterTurn(tmp_path / "f.db")
    read, write = os.pipe()
    with turn:
        child = os.fork()
        if child == 0:  # pragma: no cover - the child
            with turn:
                os.write(write, b"in")
            os._exit(0)
        ready, _, _ = select.select([read], [], [], STILL)
        assert ready == []  # the child waits while the parent holds the turn
    ready, _, _ = select.select([read], [], [], EVENT_WAIT)
    assert ready == [read]
    assert os.read(read, 2) == b"in"
    assert os.waitpid(child, 0)[1] == 0
    turn.close()
    os.close(read)
    os.close(write)
