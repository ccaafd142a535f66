"""The ``slotward`` command: serve, keys, migrate, audit, providers, bench, mcp, demo."""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from slotward.api import service
from slotward.api.bootstrap import migrate, open_store
from slotward.api.cli.audit import add_audit_parser, run_audit
from slotward.api.cli.providers import add_providers_parser, run_providers
from slotward.api.cli.serving import serve
from slotward.api.config import Config
from slotward.api.logs import configure_logging
from slotward.api.mcp.command import add_mcp_parser
from slotward.benchmarks.cli import add_bench_parser, run_bench
from slotward.benchmarks.demo import add_demo_parser, run_demo
from slotward.engine.clock import SystemClock, TimeOrderedIds
from slotward.engine.errors import SlotwardError
from slotward.engine.model import Principal

__all__ = ["main"]


def _parser(defaults: Config) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="slotward",
        description=(
            "slotward: serve, manage keys, migrate, check the audit chain, benchmark, "
            "serve the tools over MCP, watch a demo."
        ),
    )
    parser.add_argument("--db", default=defaults.db_url, help="database URL (default: %(default)s)")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run the HTTP server")
    serve.add_argument("--host", default=defaults.host)
    serve.add_argument("--port", type=int, default=defaults.port)
    serve.add_argument(
        "--demo-key", action="store_true",
        help="create an agent key for tenant 'demo' and print it (make run uses this)",
    )  # fmt: skip
    serve.add_argument(
        "--workers", type=int, default=1,
        help="worker processes accepting on the one port; use PostgreSQL beyond one",
    )  # fmt: skip
    keys = sub.add_parser("keys", help="manage API keys").add_subparsers(dest="keys", required=True)
    create = keys.add_parser("create", help="create a key; prints it as the last line")
    create.add_argument("--tenant", required=True)
    create.add_argument("--agent", required=True)
    create.add_argument("--role", choices=service.ROLES, default="agent")
    create.add_argument("--priority", type=int, default=50)
    revoke = keys.add_parser("revoke", help="revoke a key by its id (printed by keys create)")
    revoke.add_argument("key_id")
    sub.add_parser("migrate", help="bring the database schema up to date")
    add_audit_parser(sub)  # api/cli/audit.py
    add_providers_parser(sub)  # api/cli/providers.py
    add_bench_parser(sub)  # benchmarks/cli.py; bench takes its own --db
    add_mcp_parser(sub)  # api/mcp/command.py
    add_demo_parser(sub)  # benchmarks/demo.py: its own server on a temporary SQLite file
    return parser


async def _new_key(config: Config, principal: Principal) -> service.NewKey:
    store = await open_store(config)
    try:
        hasher = config.key_hasher()
        return await service.issue_key(store, principal, SystemClock(), TimeOrderedIds(), hasher)
    finally:
        await store.close()


async def _revoke(config: Config, key_id: str) -> None:
    store = await open_store(config)
    try:
        await service.withdraw_key(store, key_id, SystemClock())
    finally:
        await store.close()


_METRICS_PREFIX = "slotward-metrics-"


def _remove_orphaned_metrics() -> None:
    """Remove the metrics directories of `serve --workers` servers that died.

    A server killed outright (kill -9, even while its workers start) cannot
    remove its own; the next one does. The name carries the owner's pid.
    """
    for folder in Path(tempfile.gettempdir()).glob(f"{_METRICS_PREFIX}*-*"):
        owner = folder.name.removeprefix(_METRICS_PREFIX).split("-", 1)[0]
        if not owner.isdigit():
            continue
        try:
            os.kill(int(owner), 0)
        except ProcessLookupError:
            shutil.rmtree(folder, ignore_errors=True)
        except PermissionError:
            pass  # alive, another user's


def _serve(config: Config, *, demo_key: bool, workers: int) -> None:
    if workers <= 1:
        serve(config, demo_key=demo_key, workers=1)
        return
    _remove_orphaned_metrics()
    with tempfile.TemporaryDirectory(prefix=f"{_METRICS_PREFIX}{os.getpid()}-") as shared:
        # The workers are spawned: new interpreters inheriting this environment,
        # so prometheus-client loads in its multiprocess mode there and they
        # pool their counts in `shared` (api/metrics.py).
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = shared
        serve(replace(config, metrics_dir=shared), demo_key=demo_key, workers=workers)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        defaults = Config.from_env(os.environ)
        args = _parser(defaults).parse_args(argv)
        config = Config(**{**defaults.__dict__, "db_url": args.db})
        configure_logging(config)  # to stderr; stdout stays for what the command prints
        if args.command == "bench":
            return run_bench(args)
        if args.command == "demo":
            return run_demo(args)
        if args.command == "audit":
            return asyncio.run(run_audit(config, args))
        if args.command == "providers":
            return run_providers(config, args)
        if args.command == "mcp":
            # Imported here: the mcp package is a second of CPU no other command needs.
            from slotward.api.mcp.cli import run_mcp

            return run_mcp(config, args, os.environ)
        if args.command == "serve":
            config = Config(**{**config.__dict__, "host": args.host, "port": args.port})
            _serve(config, demo_key=args.demo_key, workers=args.workers)
        elif args.command == "keys" and args.keys == "revoke":
            asyncio.run(_revoke(config, args.key_id))
            print(f"revoked {args.key_id} (servers refuse it within "
                  f"{config.key_cache_seconds:g} s, their key cache)")  # fmt: skip
        elif args.command == "keys":
            principal = Principal(args.tenant, args.agent, args.role, args.priority)
            made = asyncio.run(_new_key(config, principal))
            print(f"created {args.role} key {made.id} for tenant {args.tenant}, "
                  f"agent {args.agent}")  # fmt: skip
            print(made.secret)
        else:
            asyncio.run(migrate(config))
            print(f"schema up to date: {config.db_url}")
    except SlotwardError as error:
        print(f"slotward: {error.code}: {error.detail}", file=sys.stderr)
        return 2
    except OSError as error:  # for example: the port is taken
        print(f"slotward: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
