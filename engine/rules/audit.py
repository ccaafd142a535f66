"""The audit chain: one chain per tenant, each entry hashing its predecessor.

Two schemes share a chain. Without an audit key an entry's hash is the plain
SHA-256 of its canonical JSON (64 hex digits): anyone can recompute it, so it
catches an edited row but not a rewritten chain. With the server's audit key
it is an HMAC-SHA256 of the same bytes, written ``hmac-sha256:<base64url>``:
only a holder of the key can make one. The prefix says which scheme an entry
claims, and a claim is only ever checked the hard way: a plain hash where a
keyed one is due is a break, so a writer without the key cannot turn keyed
entries into plain ones (a downgrade). Keyed is due

- after a keyed entry (its successor's ``prev_hash`` is keyed): once a chain
  is keyed it stays keyed, and the first keyed entry, whose MAC covers the
  plain hash before it, pins the whole plain history behind it;
- after the seq of a checkpoint (engine/rules/checkpoints.py), which only a holder
  of the key can sign;
- at the head, when the server has a key (:func:`check_chain`): a chain that
  is plain to its end vouches for nothing a writer could not have rewritten.

A server with the key keys the first entry of a new chain and every entry
after a keyed one; it extends a chain that is plain to its head in plain, so
only an operator's explicit seal (``slotward audit seal``) ever vouches for a
plain history, and a chain a writer downgraded stays ``unkeyed`` for good.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime

from slotward.engine.errors import Unavailable
from slotward.engine.model import AuditEntry
from slotward.engine.ports import AuditLog
from slotward.engine.rules.fingerprint import canonical_json
from slotward.engine.rules.timenorm import format_instant

__all__ = [
    "GENESIS",
    "KEYED_PREFIX",
    "AuditKey",
    "ChainCheck",
    "check_chain",
    "entry_hash",
    "is_keyed",
    "next_entry",
    "verify_chain",
]

GENESIS = "0" * 64
KEYED_PREFIX = "hmac-sha256:"


def _derive(secret: bytes, purpose: bytes) -> bytes:
    return hmac.new(secret, purpose, hashlib.sha256).digest()


@dataclass(frozen=True, repr=False)
class AuditKey:
    """The keys derived from the server's audit key, one per use, never the key itself.

    The chain's MAC and the checkpoints' signature use different keys, so a
    value of one can never pass for the other.
    """

    chain: bytes
    checkpoint: bytes

    @classmethod
    def derive(cls, secret: bytes) -> AuditKey:
        return cls(
            _derive(secret, b"slotward audit chain v1"),
            _derive(secret, b"slotward audit checkpoint v1"),
        )

    def __repr__(self) -> str:
        return "AuditKey(<secret>)"


def is_keyed(digest: str) -> bool:
    """Whether ``digest`` claims the keyed scheme (a claim, checked by verification)."""
    return digest.startswith(KEYED_PREFIX)


def _document(entry: AuditEntry) -> bytes:
    return canonical_json(
        {
            "tenant": entry.tenant,
            "seq": entry.seq,
            "at": format_instant(entry.at),
            "actor": entry.actor,
            "action": entry.action,
            "key": entry.key,
            "hold": entry.hold_id,
            "outcome": entry.outcome,
            "prev_hash": entry.prev_hash,
        }
    )


def entry_hash(entry: AuditEntry, key: AuditKey | None = None) -> str:
    """The entry's hash over every field but its own: HMAC under ``key``, else SHA-256."""
    body = _document(entry)
    if key is None:
        return hashlib.sha256(body).hexdigest()
    mac = hmac.new(key.chain, body, hashlib.sha256).digest()
    return KEYED_PREFIX + base64.urlsafe_b64encode(mac).rstrip(b"=").decode("ascii")


def next_entry(
    head: tuple[int, str],
    *,
    tenant: str,
    at: datetime,
    actor: str,
    action: str,
    key: str | None,
    hold_id: str | None,
    outcome: str,
    audit_key: AuditKey | None = None,
    seal: bool = False,
) -> AuditEntry:
    """The entry that follows ``head`` (``(seq, hash)``) in the tenant's chain.

    A process without the audit key refuses to extend a keyed chain: its plain
    entry would break the chain for good (a keyed chain stays keyed).

    With the key, an entry is keyed on an empty or keyed chain; a chain that is
    plain to its head is extended in plain until an operator seals it
    (``seal``, engine/rules/checkpoints.py). Keying the next entry of a plain chain
    automatically would launder it: its MAC would vouch for whatever plain
    history a database writer had put there, a full rewrite included.
    """
    if audit_key is None and is_keyed(head[1]):
        raise Unavailable(
            "the audit chain is keyed and this server has no audit key (SLOTWARD_AUDIT_KEY)",
            code="audit_key_required",
            retryable=False,
        )
    keyed = audit_key is not None and (seal or head[0] == 0 or is_keyed(head[1]))
    seq, prev = head[0] + 1, head[1]
    draft = AuditEntry(tenant, seq, at, actor, action, key, hold_id, outcome, prev, "")
    # Built again, not dataclasses.replace'd: replace walks the fields in
    # Python, and every write call appends an entry.
    digest = entry_hash(draft, audit_key if keyed else None)
    return AuditEntry(tenant, seq, at, actor, action, key, hold_id, outcome, prev, digest)


@dataclass(frozen=True)
class ChainCheck:
    """What a walk found: ``count`` entries good up to ``(seq, head)``.

    ``reason`` names the break: ``link`` (seq or prev_hash does not follow),
    ``hash`` (the hash does not match the entry), ``unkeyed`` (a plain hash
    where a keyed one is due), ``no_key`` (a keyed entry, and no key to check
    it), ``head`` (the recorded head is not where the chain ends),
    ``checkpoint`` (the chain lacks a checkpoint's entry).
    """

    ok: bool
    count: int
    head: str
    broken_at: int | None = None
    reason: str | None = None
    seq: int = 0
    keyed_from: int | None = None


def verify_chain(
    entries: Iterable[AuditEntry],
    start: tuple[int, str] = (0, GENESIS),
    *,
    key: AuditKey | None = None,
    pins: Mapping[int, str] | None = None,
    keyed_after: int | None = None,
    keyed_from: int | None = None,
) -> ChainCheck:
    """Recompute every hash in order; report the first seq that does not fit.

    ``pins`` maps seqs to the hashes checkpoints saw there; entries after
    ``keyed_after`` must be keyed. ``keyed_from`` carries the first keyed seq
    over from an earlier batch.
    """
    seq, prev, count = start[0], start[1], 0
    for entry in entries:
        reason = _fault(entry, seq, prev, key, keyed_after)
        if reason is None and pins and entry.seq in pins and pins[entry.seq] != entry.hash:
            reason = "checkpoint"
        if reason is not None:
            return ChainCheck(False, count, prev, entry.seq, reason, seq, keyed_from)
        if keyed_from is None and is_keyed(entry.hash):
            keyed_from = entry.seq
        seq, prev, count = entry.seq, entry.hash, count + 1
    return ChainCheck(True, count, prev, seq=seq, keyed_from=keyed_from)


def _fault(
    entry: AuditEntry, seq: int, prev: str, key: AuditKey | None, keyed_after: int | None
) -> str | None:
    if entry.seq != seq + 1 or entry.prev_hash != prev:
        return "link"
    if is_keyed(entry.hash):
        if key is None:
            return "no_key"
        return None if hmac.compare_digest(entry.hash, entry_hash(entry, key)) else "hash"
    if is_keyed(prev) or (keyed_after is not None and entry.seq > keyed_after):
        return "unkeyed"
    return None if entry.hash == entry_hash(entry) else "hash"


def check_chain(
    log: AuditLog,
    tenant: str,
    key: AuditKey | None,
    pins: Mapping[int, str] | None = None,
    *,
    batch: int = 5000,
    keyed_head: bool = True,
) -> ChainCheck:
    """Walk the tenant's stored chain in batches, inside the caller's transaction.

    The chain must end where the recorded head says (a deleted tail leaves
    every remaining link intact, and only the head shows it), reach every
    pinned seq (a tail deleted with the head moved back shows only there),
    and, with a key and ``keyed_head``, end on a keyed entry.
    """
    keyed_after = min(pins) if pins else None
    check = ChainCheck(True, 0, GENESIS)
    while True:
        entries = log.entries(tenant, check.seq, batch)
        step = verify_chain(
            entries, (check.seq, check.head), key=key, pins=pins,
            keyed_after=keyed_after, keyed_from=check.keyed_from,
        )  # fmt: skip
        check = replace(step, count=check.count + step.count)
        if not check.ok or len(entries) < batch:
            break
    if check.ok and log.head(tenant) != (check.seq, check.head):
        check = replace(check, ok=False, broken_at=check.seq + 1, reason="head")
    elif check.ok and pins and max(pins) > check.seq:
        check = replace(check, ok=False, broken_at=check.seq + 1, reason="checkpoint")
    elif check.ok and key is not None and keyed_head and check.count and check.keyed_from is None:
        check = replace(check, ok=False, broken_at=check.seq, reason="unkeyed")
    return check
