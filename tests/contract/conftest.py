"""The store under contract, three times over: the fakes, a SQLite file, PostgreSQL.

SQLAlchemy's dialect compliance suite is the model: every test is written once
against the ports, through units of work, and runs on each implementation
(ids ``fake``, ``sqlite``, ``sqlite_grouped``, ``postgres``: ``-k "not
postgres"`` is the fast part). The SQL stores are the real ones, run as the
server runs them: SQLite's writer thread (``SqliteStore.run_write_sync``, a
call alone) and a call in a group of them (its savepoint), PostgreSQL's
``write`` over asyncpg on an event loop of the test session's.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from sqlalchemy import create_engine, event, inspect, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.pool import NullPool

from slotward.adapters.store.postgres.store import PostgresStore
from slotward.adapters.store.sqlite.savepoint import SavepointUnitOfWork
from slotward.adapters.store.sqlite.store import SqliteStore
from slotward.engine.fakes import InMemoryUnitOfWork, State
from slotward.engine.ports import UnitOfWork
from tests.conftest import TEMPLATE
from tests.contract.values import MAX_HOLD
from tests.pgserver import PgServer

T = TypeVar("T")

CONTRACT_DB = "slotward_contract"  # one for the run, emptied before each test


class Db:
    """One store: ``run`` hands a function a fresh unit of work, not yet entered."""

    def __init__(self, run: Callable[[Callable[[UnitOfWork], Any]], Any]) -> None:
        self._run = run

    def run(self, fn: Callable[[UnitOfWork], T]) -> T:
        value: T = self._run(fn)
        return value

    def commit(self, fn: Callable[[UnitOfWork], T]) -> T:
        """``fn`` in one transaction, committed."""

        def committed(uow: UnitOfWork) -> T:
            with uow:
                value = fn(uow)
                uow.commit()
                return value

        return self.run(committed)

    def look(self, fn: Callable[[UnitOfWork], T]) -> T:
        """``fn`` in one transaction, left without a commit (so rolled back)."""

        def looked(uow: UnitOfWork) -> T:
            with uow:
                return fn(uow)

        return self.run(looked)


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A migrated SQLite file, copied for each test: migrating costs more than a test."""
    path = tmp_path_factory.mktemp("contract") / "template.db"
    store = SqliteStore.open(f"sqlite:///{path}", MAX_HOLD)
    asyncio.run(store.close())
    return path


class _Postgres:
    """The PostgreSQL store of the run, on an event loop of its own."""

    def __init__(self, server: PgServer) -> None:
        url = server.create_database(CONTRACT_DB, template=TEMPLATE)
        self.loop = asyncio.new_event_loop()
        self.store = self.loop.run_until_complete(PostgresStore.open(url, MAX_HOLD))
        self._sync = create_engine(url.replace("+asyncpg", "+psycopg"), poolclass=NullPool)
        names = inspect(self._sync).get_table_names()
        self._empty = text(f"TRUNCATE {', '.join(n for n in names if n != 'alembic_version')}")

    def run(self, fn: Callable[[UnitOfWork], T]) -> T:
        return self.loop.run_until_complete(self.store.write(fn))

    def empty(self) -> None:
        with self._sync.begin() as conn:
            conn.execute(self._empty)

    def close(self) -> None:
        self._sync.dispose()
        self.loop.run_until_complete(self.store.close())
        self.loop.close()


@pytest.fixture(scope="session")
def postgres_store(postgres: PgServer) -> Iterator[_Postgres]:
    pg = _Postgres(postgres)
    try:
        yield pg
    finally:
        pg.close()


class _Grouped:
    """A call as SQLite's writer runs it in a group: in a savepoint of a shared
    transaction (adapters/store/sqlite/groups.py ``GroupRunner``), the others'
    work around it left out."""

    def __init__(self, path: Path) -> None:
        self._engine = create_engine(f"sqlite:///{path}", poolclass=NullPool)
        event.listen(self._engine, "connect", _own_transactions)
        self._conn = self._engine.connect()

    def run(self, fn: Callable[[UnitOfWork], T]) -> T:
        self._conn.exec_driver_sql("BEGIN IMMEDIATE")
        try:
            value = fn(SavepointUnitOfWork(self._conn, MAX_HOLD))
        except DBAPIError:  # the group is in doubt: undone whole
            self._conn.rollback()
            raise
        except BaseException:  # the call failed alone: the group commits
            self._conn.commit()
            raise
        self._conn.commit()
        return value

    def close(self) -> None:
        self._conn.close()
        self._engine.dispose()


def _own_transactions(dbapi_conn: Any, _record: Any) -> None:
    dbapi_conn.isolation_level = None  # BEGIN is ours, as the store's connections


def _sqlite_copy(request: pytest.FixtureRequest, tmp_path: Path) -> Path:
    template: Path = request.getfixturevalue("sqlite_template")
    path = tmp_path / "contract.db"
    for suffix in ("", "-wal"):
        source = template.with_name(template.name + suffix)
        if source.exists():
            shutil.copyfile(source, path.with_name(path.name + suffix))
    return path


@pytest.fixture(params=["fake", "sqlite", "sqlite_grouped", "postgres"])
def db(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Db]:
    if request.param == "fake":
        state = State()
        yield Db(lambda fn: fn(InMemoryUnitOfWork(state)))
    elif request.param == "sqlite":
        store = SqliteStore(_sqlite_copy(request, tmp_path), MAX_HOLD, readers=1)
        try:
            yield Db(store.run_write_sync)
        finally:
            asyncio.run(store.close())
    elif request.param == "sqlite_grouped":
        grouped = _Grouped(_sqlite_copy(request, tmp_path))
        try:
            yield Db(grouped.run)
        finally:
            grouped.close()
    else:
        pg: _Postgres = request.getfixturevalue("postgres_store")
        pg.empty()
        yield Db(pg.run)
