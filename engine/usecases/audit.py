"""Use cases of the audit chain's keeping: seal a chain written before the key,
take a signed checkpoint of its head (``slotward audit seal|checkpoint``).

The token format and its signature are rules (engine/rules/checkpoints.py).
"""

from __future__ import annotations

from slotward.engine.errors import Conflict
from slotward.engine.ports import Clock, UnitOfWork
from slotward.engine.rules.audit import AuditKey, ChainCheck, check_chain, is_keyed, next_entry
from slotward.engine.rules.checkpoints import SEAL_ACTION, Checkpoint, sign_checkpoint
from slotward.engine.rules.timenorm import format_instant

__all__ = ["seal_chain", "take_checkpoint"]


def take_checkpoint(uow: UnitOfWork, tenant: str, key: AuditKey, clock: Clock) -> str:
    """Verify the tenant's chain and sign its head.

    A chain that does not verify is not signed (``audit_chain_broken``): a
    checkpoint would bless the damage. Nor is a chain plain to its head
    (``reason: unkeyed``): it may be a rewrite, and only :func:`seal_chain`, an
    operator's explicit act, may vouch for a plain history.
    """
    with uow:
        uow.lock_tenant(tenant)
        now = clock.now()  # after the lock
        check = _verified(uow, tenant, key, keyed_head=True)
    return sign_checkpoint(Checkpoint(tenant, check.seq, check.head, format_instant(now)), key)


def seal_chain(uow: UnitOfWork, tenant: str, key: AuditKey, clock: Clock) -> int | None:
    """Seal a chain written before the key: a keyed ``audit.seal`` entry; its seq.

    The seal's MAC covers the plain hash before it, so it vouches for the plain
    history as it is now: run it once, when the key is turned on, on chains you
    trust (a chain that reads ``unkeyed`` after it was sealed was rewritten,
    and sealing it again would bless the rewrite). A chain already keyed, or
    empty, needs no seal (None); a broken one is refused (Conflict).
    """
    with uow:
        uow.lock_tenant(tenant)
        now = clock.now()  # after the lock
        check = _verified(uow, tenant, key, keyed_head=False)
        if check.seq == 0 or is_keyed(check.head):
            return None
        seal = next_entry(
            (check.seq, check.head), tenant=tenant, at=now, actor="system",
            action=SEAL_ACTION, key=None, hold_id=None, outcome="sealed",
            audit_key=key, seal=True,
        )  # fmt: skip
        uow.audit.append(seal)
        uow.commit()
        return seal.seq


def _verified(uow: UnitOfWork, tenant: str, key: AuditKey, *, keyed_head: bool) -> ChainCheck:
    check = check_chain(uow.audit, tenant, key, keyed_head=keyed_head)
    if not check.ok:
        hint = (
            ": a chain written before SLOTWARD_AUDIT_KEY was set needs `slotward audit seal`"
            " once; one that was ever keyed has been rewritten, and sealing it would bless that"
            if check.reason == "unkeyed"
            else ""
        )
        raise Conflict(
            f"the audit chain of this tenant breaks at seq {check.broken_at} "
            f"({check.reason}): nothing is signed{hint}",
            code="audit_chain_broken",
            extra={"broken_at": check.broken_at, "reason": check.reason},
        )
    return check
