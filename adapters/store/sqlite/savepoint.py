"""A call's unit of work in a group of SQLite's writer: its transaction is a savepoint.

The writer (adapters/store/sqlite/writer.py) runs the calls that queued up
together in one ``BEGIN IMMEDIATE`` transaction, first without savepoints, and
again with a savepoint per call if one of them leaves work to undo, so that
each keeps the meaning it had alone.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any

from sqlalchemy import Connection, Executable

from slotward.adapters.store.repos import HEAD_MOVE, SqlAudit, SqlUnitOfWork, head_moved
from slotward.adapters.store.runner import Row, Runner, runner_for
from slotward.engine.model import AuditEntry

__all__ = ["SavepointUnitOfWork"]

Params = Mapping[str, Any]


class _Savepoint:
    """The runner of a call in a group, which opens its savepoint again after a commit.

    A call's commit releases its savepoint, and most calls end there: the next
    one is opened only if the call runs another statement through its unit of
    work (two statements a call fewer than a new savepoint at every commit and
    a rollback to it at every end). So after a commit a call's statements must
    go through its repositories, as they all do, not straight to the connection.
    """

    __slots__ = ("_db", "audit", "conn", "open", "wanted")

    def __init__(self, db: Runner) -> None:
        self._db = db
        self.conn = db.conn
        self.wanted = False  # a statement is to run inside the call's savepoint
        self.open = False
        self.audit: _GroupAudit | None = None  # its heads follow the savepoint

    def begin(self) -> None:
        self.wanted = False
        self._db.sql("SAVEPOINT call")
        self.open = True
        if self.audit is not None:
            self.audit.mark()

    def rows(self, stmt: Executable, params: Params | None = None) -> list[Row]:
        if self.wanted:
            self.begin()
        return self._db.rows(stmt, params)

    def first(self, stmt: Executable, params: Params | None = None) -> Row | None:
        if self.wanted:
            self.begin()
        return self._db.first(stmt, params)

    def scalars(self, stmt: Executable, params: Params | None = None) -> list[Any]:
        if self.wanted:
            self.begin()
        return self._db.scalars(stmt, params)

    def write(self, stmt: Executable, params: Params | Sequence[Params]) -> int:
        if self.wanted:
            self.begin()
        return self._db.write(stmt, params)

    def put(self, stmt: Executable, params: Params | Sequence[Params]) -> None:
        if self.wanted:
            self.begin()
        self._db.put(stmt, params)

    def flush(self) -> None:
        self._db.flush()  # SQLite puts nothing aside: no statement to open for

    def dynamic(self, stmt: Executable) -> list[Row]:
        if self.wanted:
            self.begin()
        return self._db.dynamic(stmt)

    def sql(self, statement: str) -> None:
        if self.wanted:
            self.begin()
        self._db.sql(statement)

    def raw(self, statement: str) -> None:
        """Run ``statement`` as it is, outside the call's savepoint."""
        self._db.sql(statement)

    def release(self) -> None:
        """Keep what was done since the savepoint opened (a commit)."""
        if self.open:
            self.open = False
            self._db.sql("RELEASE SAVEPOINT call")

    def undo(self) -> None:
        """Undo what was done since the savepoint opened."""
        if self.open:
            self.open = False
            if self.audit is not None:
                self.audit.restore()
            self._db.sql("ROLLBACK TO SAVEPOINT call")
            self._db.sql("RELEASE SAVEPOINT call")


class _GroupAudit(SqlAudit):
    """The audit chains in a group's transaction: each head read once.

    Every create appends to its tenant's chain, reading the head first. Within
    one ``BEGIN IMMEDIATE`` transaction no other writer, of this process or
    another, can move a head: so a head is read at its first use in the group
    and kept here as the group's calls extend it. Nothing outlives the group:
    ``begin_group`` forgets it all (another process may write between two
    groups), and a group that fails is rolled back whole.

    Run without savepoints (``defer``), a group moves each head row once, just
    before its COMMIT (``write_heads``): none of its calls is undone alone (the
    group would be run again, with savepoints), and nothing but ``head`` reads
    a head row (a verification reads it through ``head``). With savepoints,
    each append moves the row, and what a call's savepoint undoes this undoes
    too: the heads are marked when a savepoint opens, restored when it is
    rolled back.
    """

    def __init__(self, db: Runner) -> None:
        super().__init__(db)
        self._heads: dict[str, tuple[int, str]] = {}
        self._marked: dict[str, tuple[int, str]] = {}
        self._moved: dict[str, tuple[int, str]] = {}  # rows to move before the COMMIT
        self._defer = False

    def begin_group(self, *, defer: bool) -> None:
        self._heads = {}
        self._marked = {}
        self._moved = {}
        self._defer = defer

    def mark(self) -> None:
        self._marked = self._heads.copy()

    def restore(self) -> None:
        self._heads = self._marked.copy()

    def head(self, tenant: str) -> tuple[int, str]:
        found = self._heads.get(tenant)
        if found is None:
            found = self._heads[tenant] = super().head(tenant)
        return found

    def append(self, entry: AuditEntry) -> None:
        if self._defer and entry.seq > 1:
            self._add(entry)
            self._moved[entry.tenant] = (entry.seq, entry.hash)
        else:  # a chain's first entry makes its head row now
            super().append(entry)
        self._heads[entry.tenant] = (entry.seq, entry.hash)

    def write_heads(self) -> None:
        """Move the head rows the group extended (one statement, before its COMMIT)."""
        moved, self._moved = self._moved, {}
        if moved:
            self._db.write(HEAD_MOVE, [head_moved(t, seq, h) for t, (seq, h) in moved.items()])


class SavepointUnitOfWork(SqlUnitOfWork):
    """One call's unit of work inside a group: its transaction is a savepoint.

    The writer keeps one per connection and hands it to each call in turn:
    seventeen repositories and a cursor made per call cost more than some of
    the call's statements.

    A group runs first without savepoints (``undoable`` False): a savepoint
    copies every page its call changes, some 35 a create, to undo a call that
    almost never needs it. A call then only notes whether it left work to
    undo: rows changed (sqlite3's count of them, whatever ran the statement)
    since it began or last committed, when it ends (``spoiled``). The writer
    then rolls the group back and runs it again with a savepoint per call
    (adapters/store/sqlite/writer.py), so that each keeps the meaning it had
    alone. Statements that change no row (DDL) are not counted: a call in a
    group does not run them.
    """

    def __init__(self, conn: Connection, max_hold: Any) -> None:
        self._savepoint = _Savepoint(runner_for(conn))
        super().__init__(conn, max_hold, begin=None, db=self._savepoint)
        self._heads = self.audit = self._savepoint.audit = _GroupAudit(self._savepoint)
        driver = conn.connection.driver_connection
        assert isinstance(driver, sqlite3.Connection)
        self._driver = driver
        self.undoable = True  # a savepoint per call
        self.spoiled = False  # without one: a call left work to undo
        self._changes = 0  # rows changed on the connection when the call began or committed

    def __enter__(self) -> SavepointUnitOfWork:
        self.holds.forget()
        if self.undoable:
            self._savepoint.begin()
        else:
            self._changes = self._driver.total_changes
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        # What was done since the last commit is undone, as alone.
        self.holds.forget()
        if self.undoable:
            self._savepoint.wanted = False
            self._savepoint.undo()
        elif self._driver.total_changes != self._changes:
            self.spoiled = True

    def commit(self) -> None:
        # Kept (in the group's transaction); what follows gets a savepoint of its own.
        self.holds.forget()
        if self.undoable:
            self._savepoint.release()
            self._savepoint.wanted = True
        else:
            self._changes = self._driver.total_changes

    # The group's transaction, on the driver's cursor: through SQLAlchemy's
    # Connection a BEGIN and a COMMIT cost some 130 us more, once a group.
    def begin_group(self) -> None:
        """Open the group's transaction (``BEGIN IMMEDIATE``)."""
        self._heads.begin_group(defer=not self.undoable)
        self._savepoint.raw("BEGIN IMMEDIATE")

    def commit_group(self) -> None:
        """Commit the group's transaction; a database error is raised as SQLAlchemy's."""
        self._heads.write_heads()
        self._savepoint.raw("COMMIT")
        if self._conn.in_transaction():
            # A statement run through SQLAlchemy (``dynamic``) began its own
            # view of the transaction: closed too (nothing is left to commit).
            self._conn.commit()
