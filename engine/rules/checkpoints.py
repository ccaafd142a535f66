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

from slotward.engine.errors import ValidationFailed
from slotward.engine.rules.audit import GENESIS, AuditKey
from slotward.engine.rules.fingerprint import canonical_json

__all__ = [
    "SEAL_ACTION",
    "Checkpoint",
    "read_checkpoint",
    "sign_checkpoint",
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
