"""The reference server: the store transaction of a slotward hold create, and nothing else.

    python -m slotward.benchmarks.reference --db URL --port P [--host 127.0.0.1] [--workers N]

It is the yardstick slotward's create rate is measured against, so it is a
correct minimal implementation, neither crippled nor cutting corners: no auth,
no validation beyond parsing, no logging, no metrics, but the same transaction.
``POST /v1/holds`` takes slotward's create body (``workflow_id``,
``attendees``, ``start``, ``duration_minutes``; the tenant is ``bench``, or the
``X-Tenant`` header) and runs one transaction that:

1. looks the call's idempotency key up, and answers a stored answer with 200;
2. checks each attendee for an overlapping active hold: 409 ``slot_conflict``;
3. inserts the hold, one row per attendee, the idempotency record with the
   answer, a hash-chained audit entry and a ``hold.created`` outbox row;
4. commits and answers 201 with the hold document.

``--db`` is a SQLite file URL (``sqlite:///path``, any driver suffix;
benchmarks/reference_sqlite.py) or a PostgreSQL URL (``postgresql://`` or
``postgresql+asyncpg://``; benchmarks/reference_postgres.py). Its ``ref_``
tables are created at start if missing, beside anything else in the database.
``GET /healthz`` answers 200.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
from collections.abc import AsyncIterator, Sequence
from typing import Protocol

from aiohttp import web

from slotward.benchmarks.baseline_serving import add_serving_arguments, health_handler, serve
from slotward.benchmarks.reference_model import (
    BAD_REQUEST,
    TENANT,
    UNAVAILABLE,
    BadRequest,
    Claim,
    Unavailable,
    parse_claim,
)
from slotward.benchmarks.reference_postgres import (
    PostgresReference,
    asyncpg_dsn,
    create_postgres_schema,
)
from slotward.benchmarks.reference_sqlite import (
    SqliteReference,
    create_sqlite_schema,
    sqlite_file,
)

__all__ = ["create_schema", "main", "reference_app"]


class _Store(Protocol):
    async def create(self, claim: Claim) -> tuple[int, bytes]: ...

    async def close(self) -> None: ...


def _json(status: int, body: bytes) -> web.Response:
    return web.Response(status=status, body=body, content_type="application/json")


async def _open(url: str) -> _Store:
    path, dsn = sqlite_file(url), asyncpg_dsn(url)
    if path is not None:
        return SqliteReference(path)
    if dsn is not None:
        return await PostgresReference.open(dsn)
    raise ValueError(f"not a SQLite file or PostgreSQL URL: {url!r}")


async def create_schema(url: str) -> None:
    """Create the ``ref_`` tables in the database of ``url`` if they are missing."""
    path, dsn = sqlite_file(url), asyncpg_dsn(url)
    if path is not None:
        create_sqlite_schema(path)
    elif dsn is not None:
        await create_postgres_schema(dsn)
    else:
        raise ValueError(f"not a SQLite file or PostgreSQL URL: {url!r}")


async def reference_app(url: str) -> web.Application:
    """The reference app on the database of ``url`` (its store opens with the app)."""
    app = web.Application()
    stores: list[_Store] = []

    async def store_lifetime(_: web.Application) -> AsyncIterator[None]:
        stores.append(await _open(url))
        yield
        await stores[0].close()

    async def create(request: web.Request) -> web.Response:
        try:
            claim = parse_claim(await request.read(), request.headers.get("X-Tenant", TENANT))
        except BadRequest:
            return _json(400, BAD_REQUEST)
        try:
            status, body = await stores[0].create(claim)
        except Unavailable:
            return _json(503, UNAVAILABLE)
        return _json(status, body)

    app.cleanup_ctx.append(store_lifetime)
    app.router.add_get("/healthz", health_handler)
    app.router.add_post("/v1/holds", create)
    return app


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="The reference server of `slotward bench`.")
    parser.add_argument("--db", required=True, help="sqlite:///FILE or postgresql://...")
    add_serving_arguments(parser)
    args = parser.parse_args(argv)
    if sqlite_file(args.db) is None and asyncpg_dsn(args.db) is None:
        parser.error(f"--db: not a SQLite file or PostgreSQL URL: {args.db!r}")
    asyncio.run(create_schema(args.db))  # once, before any worker serves
    factory = functools.partial(reference_app, args.db)
    serve(factory, name="reference", host=args.host, port=args.port, workers=args.workers)


if __name__ == "__main__":
    main()
