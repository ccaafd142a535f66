"""Signed audit checkpoints: a tenant's chain head, kept outside the database.

A checkpoint is ``swcp1.<payload>.<signature>``, both base64url without
padding: the payload is the canonical JSON of ``{"tenant", "seq", "hash",
"at"}``, the signature an HMAC-SHA256 of ``swcp1.<payload>`` under the key
derived from the audit key for checkpoints (not the chain's: domain
separation). It carries no secret and may be stored anywhere; what it proves
is that a holder of the key saw ``hash`` at ``seq``. A later chain must still
hold that entry, so a tail deleted behind a kept checkpoint is caught.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import re
from dataclasses import dataclass
from typing import Any

from slotward.engine.errors import Conflict, ValidationFailed
from slotward.engine.ports import Clock, UnitOfWork
from slotward.engine.rules.audit import (
    GENESIS,
    AuditKey,
    ChainCheck,
    check_chain,
    is_keyed,
    next_entry,
)
from slotward.engine.rules.fingerprint import canonical_json
from slotward.engine.rules.timenorm import format_instant

__all__ = [
    "SEAL_ACTION",
    "Checkpoint",
    "read_checkpoint",
    "seal_chain",
    "sign_checkpoint",
    "take_checkpoint",
]

_PREFIX = "swcp1"
_MAX_CHARS = 2048
_B64 = re.compile(r"[A-Za-z0-9_-]+")
_FIELDS = {"tenant", "seq", "hash", "at"}
SEAL_ACTION = "audit.seal"  # the keyed entry `slotward audit seal` appends to a plain chain


@dataclass(frozen=True)
class Checkpoint:
    tenant: str
    seq: int
    hash: str
    at: str


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    if not _B64.fullmatch(text):
        raise _malformed("is not base64url")
    try:
        data = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError):
        raise _malformed("is not base64url") from None
    if _b64(data) != text:  # one spelling per value
        raise _malformed("is not canonical base64url")
    return data


def _malformed(why: str) -> ValidationFailed:
    return ValidationFailed(
        f"the checkpoint {why}", code="invalid_checkpoint", extra={"field": "checkpoint"}
    )


def _signature(key: AuditKey, signed: str) -> bytes:
    return hmac.new(key.checkpoint, signed.encode("ascii"), hashlib.sha256).digest()


def sign_checkpoint(point: Checkpoint, key: AuditKey) -> str:
    payload = {"tenant": point.tenant, "seq": point.seq, "hash": point.hash, "at": point.at}
    signed = f"{_PREFIX}.{_b64(canonical_json(payload))}"
    return f"{signed}.{_b64(_signature(key, signed))}"


def read_checkpoint(token: str, key: AuditKey | None, tenant: str | None = None) -> Checkpoint:
    """The checkpoint in ``token``, once its signature and (given) tenant are checked.

    Refusals are ValidationFailed with stable codes: ``invalid_checkpoint`` (not one),
    ``checkpoint_signature_invalid`` (not signed under this server's key),
    ``checkpoint_wrong_tenant``, ``audit_key_not_set`` (nothing to check with).
    """
    if key is None:
        raise ValidationFailed(
            "this server has no audit key (SLOTWARD_AUDIT_KEY): it cannot check a checkpoint",
            code="audit_key_not_set",
        )
    token = token.strip()
    if len(token) > _MAX_CHARS or not token.isascii():
        raise _malformed("is not a slotward checkpoint")
    parts = token.split(".")
    if len(parts) != 3 or parts[0] != _PREFIX:
        raise _malformed(f"is not a slotward checkpoint ({_PREFIX}.<payload>.<signature>)")
    payload, signature = _unb64(parts[1]), _unb64(parts[2])
    if not hmac.compare_digest(signature, _signature(key, f"{parts[0]}.{parts[1]}")):
        raise ValidationFailed(
            "the checkpoint's signature does not verify under this server's audit key",
            code="checkpoint_signature_invalid",
            extra={"field": "checkpoint"},
        )
    point = _parse(payload)
    if tenant is not None and point.tenant != tenant:
        raise ValidationFailed(
            "the checkpoint is another tenant's",
            code="checkpoint_wrong_tenant",
            extra={"field": "checkpoint"},
        )
    return point


def _parse(payload: bytes) -> Checkpoint:
    try:
        doc: Any = json.loads(payload)
    except ValueError:
        raise _malformed("payload is not JSON") from None
    if not isinstance(doc, dict) or set(doc) != _FIELDS:
        raise _malformed("payload lacks tenant, seq, hash or at")
    seq, digest = doc["seq"], doc["hash"]
    if type(seq) is not int or not 0 <= seq < 2**53:
        raise _malformed("seq is not a whole number")
    if not all(isinstance(doc[f], str) for f in ("tenant", "hash", "at")):
        raise _malformed("payload has a field of the wrong type")
    if (seq == 0) != (digest == GENESIS):
        raise _malformed("hash does not fit its seq")
    return Checkpoint(doc["tenant"], seq, digest, doc["at"])


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
