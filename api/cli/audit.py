"""``slotward audit seal|checkpoint|verify``, straight on the database.

``seal`` keys the chains written before the audit key was set (once, when it
is turned on); ``checkpoint`` prints one signed head per tenant (one line
each), to be kept where a database writer cannot reach; ``verify`` checks
every chain (or one) and, given such a file, that each chain still holds its
checkpoints. Each prints one line per tenant; the exit status is 0 when every
tenant passed, 1 when one did not, 2 for an error (a bad checkpoint file, no
audit key).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import TypeVar

from slotward.api import service
from slotward.api.bootstrap import open_store
from slotward.api.config import Config
from slotward.engine.clock import SystemClock
from slotward.engine.errors import SlotwardError, ValidationFailed
from slotward.engine.ports import Store
from slotward.engine.rules.audit import AuditKey
from slotward.engine.rules.checkpoints import Checkpoint, read_checkpoint

__all__ = ["add_audit_parser", "run_audit"]

T = TypeVar("T")


def add_audit_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    audit = sub.add_parser("audit", help="seal, checkpoint and verify the audit chains")
    commands = audit.add_subparsers(dest="audit", required=True)
    seal = commands.add_parser(
        "seal",
        help="key the chains written before SLOTWARD_AUDIT_KEY was set (once, when turning it on)",
    )
    which = seal.add_mutually_exclusive_group(required=True)  # never every tenant by default
    which.add_argument("--tenant", help="this tenant's chain")
    which.add_argument(
        "--all", action="store_true", help="every tenant's (right after setting the key only)"
    )
    point = commands.add_parser(
        "checkpoint", help="print a signed head per tenant (needs SLOTWARD_AUDIT_KEY)"
    )
    point.add_argument("--tenant", help="only this tenant (default: every tenant)")
    verify = commands.add_parser("verify", help="recompute the chains; exit 1 if one fails")
    verify.add_argument("--tenant", help="only this tenant (default: every tenant)")
    verify.add_argument(
        "--checkpoint", type=Path, metavar="FILE",
        help="checkpoints (one per line, from `audit checkpoint`) the chains must still hold",
    )  # fmt: skip


async def run_audit(config: Config, args: argparse.Namespace) -> int:
    key = config.policy().audit_key
    points = [] if args.audit != "verify" or args.checkpoint is None else _read(args, key)
    store = await open_store(config)
    try:
        tenants = await _tenants(store, args.tenant, points)
        if args.audit == "seal":
            return await _seals(store, tenants, _required(key, "a seal is keyed"))
        if args.audit == "checkpoint":
            return await _checkpoints(store, tenants, _required(key, "a checkpoint is signed"))
        return await _verify(store, tenants, key, points)
    finally:
        await store.close()


def _read(args: argparse.Namespace, key: AuditKey | None) -> list[Checkpoint]:
    try:
        text = args.checkpoint.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as error:
        raise ValidationFailed(
            f"cannot read the checkpoint file: {error}", code="invalid_checkpoint"
        ) from None
    lines = [line.strip() for line in text.splitlines()]
    points = [read_checkpoint(line, key) for line in lines if line and not line.startswith("#")]
    if not points:
        raise ValidationFailed("the checkpoint file holds no checkpoint", code="invalid_checkpoint")
    if args.tenant is not None:
        points = [p for p in points if p.tenant == args.tenant]
        if not points:
            raise ValidationFailed(
                "the checkpoint file holds none of this tenant's", code="checkpoint_wrong_tenant"
            )
    return points


async def _tenants(store: Store, only: str | None, points: list[Checkpoint]) -> list[str]:
    if only is not None:
        return [only]
    found = await service.audited_tenants(store)
    # A tenant whose rows are all gone still has its checkpoints to fail.
    return sorted(set(found) | {p.tenant for p in points})


def _required(key: AuditKey | None, why: str) -> AuditKey:
    if key is None:
        raise ValidationFailed(
            f"SLOTWARD_AUDIT_KEY is not set: {why} under it", code="audit_key_not_set"
        )
    return key


async def _seals(store: Store, tenants: list[str], key: AuditKey) -> int:
    def line(tenant: str, seq: int | None) -> str:
        doc = {"tenant": tenant, "sealed": seq is not None, "seq": seq}
        return json.dumps(doc, separators=(",", ":"))

    return await _each_tenant(store, tenants, partial(service.seal_audit, key=key), line)


async def _checkpoints(store: Store, tenants: list[str], key: AuditKey) -> int:
    return await _each_tenant(
        store, tenants, partial(service.checkpoint_audit, key=key), lambda _tenant, token: token
    )


async def _each_tenant(
    store: Store,
    tenants: list[str],
    act: Callable[..., Awaitable[T]],
    line: Callable[[str, T], str],
) -> int:
    """Run the service ``act`` for each tenant, printing a line per success; 1 if one failed."""
    failed = 0
    for tenant in tenants:
        try:
            done = await act(store, tenant=tenant, clock=SystemClock())
        except SlotwardError as error:
            print(f"slotward: tenant {tenant}: {error.code}: {error.detail}", file=sys.stderr)
            failed += 1
            continue
        print(line(tenant, done), flush=True)
    return 1 if failed else 0


async def _verify(
    store: Store, tenants: list[str], key: AuditKey | None, points: list[Checkpoint]
) -> int:
    failed = 0
    for tenant in tenants:
        mine = [p for p in points if p.tenant == tenant]
        doc = await service.verify_tenant_audit(store, tenant, key, mine)
        print(json.dumps({"tenant": tenant, **doc}, separators=(",", ":")), flush=True)
        failed += not doc["ok"]
    return 1 if failed else 0
