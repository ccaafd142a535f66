"""How API keys are stored: scrypt, salted by the key's id, peppered when a
pepper is configured.

A key reads ``sw_<key id>.<secret>``: the id names the row to check, so a
server verifies one slow hash per new key, not a search. The stored form names
its parameters, ``scrypt$<log2 N>$<r>$<p>$<hash>`` (``scryptp`` when the input
was HMAC-SHA256 under the pepper), so a later change of cost or pepper leaves
every existing key verifiable. The default cost is the scrypt paper's
interactive setting, N = 2^14, r = 8, p = 1: about 16 MiB and 30 ms here.

Keys made before this scheme (``sw_<secret>``, stored as SHA-256 or its HMAC)
are still found by their fast hash until revoked.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

__all__ = ["DEFAULT_LOG_N", "KeyHasher", "legacy_hash", "split_key"]

DEFAULT_LOG_N = 14
_R, _P = 8, 1
_KEY = re.compile(r"sw_(key_[0-9a-f]{1,60})\.([A-Za-z0-9_-]{16,128})")
_STORED = re.compile(r"(scryptp?)\$(\d{1,2})\$(\d{1,2})\$(\d{1,2})\$([A-Za-z0-9_-]{43})")


def legacy_hash(secret: str) -> str:
    """The plain SHA-256 a key made before scrypt was stored as."""
    return hashlib.sha256(secret.encode()).hexdigest()


def split_key(secret: str) -> str | None:
    """The key id a presented key names, or None for a legacy or malformed key."""
    found = _KEY.fullmatch(secret)
    return found.group(1) if found else None


@dataclass(frozen=True)
class KeyHasher:
    """Makes and checks stored key hashes; ``pepper`` is the server-side secret.

    With a pepper (``SLOTWARD_KEY_PEPPER``) a copy of the database alone does
    not even let a thief test a guessed key. Changing the pepper retires every
    key made under the old one; keys made without one keep working.
    """

    pepper: bytes | None = None
    log_n: int = DEFAULT_LOG_N

    def new_key(self, key_id: str) -> tuple[str, str]:
        """A fresh key for ``key_id`` and the form to store: ``(secret, stored)``."""
        secret = f"sw_{key_id}.{secrets.token_urlsafe(32)}"
        if split_key(secret) != key_id:
            raise ValueError(f"not a key id: {key_id!r}")
        peppered = self.pepper is not None
        digest = _scrypt(self._input(secret, peppered), key_id, self.log_n, _R, _P)
        scheme = "scryptp" if peppered else "scrypt"
        return secret, f"{scheme}${self.log_n}${_R}${_P}${_b64(digest)}"

    def verify(self, secret: str, key_id: str, stored: str) -> bool:
        """Whether ``secret`` is the key stored as ``stored`` (slow: run it off the loop)."""
        found = _STORED.fullmatch(stored)
        if found is None:
            return False
        scheme, log_n, r, p, want = found.groups()
        peppered = scheme == "scryptp"
        if peppered and self.pepper is None:
            return False  # made under a pepper this server does not have
        if not (1 <= int(log_n) <= 18 and 1 <= int(r) <= 16 and 1 <= int(p) <= 4):
            return False
        digest = _scrypt(self._input(secret, peppered), key_id, int(log_n), int(r), int(p))
        return hmac.compare_digest(_b64(digest), want)

    def legacy_candidates(self, secret: str) -> tuple[str, ...]:
        """The fast hashes a pre-scrypt key may be stored as, newest first."""
        if self.pepper is None:
            return (legacy_hash(secret),)
        peppered = hmac.new(self.pepper, secret.encode(), hashlib.sha256).hexdigest()
        return (peppered, legacy_hash(secret))

    def _input(self, secret: str, peppered: bool) -> bytes:
        if peppered and self.pepper is not None:
            return hmac.new(self.pepper, secret.encode(), hashlib.sha256).digest()
        return secret.encode()


def _scrypt(data: bytes, key_id: str, log_n: int, r: int, p: int) -> bytes:
    cost = 2**log_n
    memory = 128 * r * (cost + p + 2) + 1024 * 1024
    return hashlib.scrypt(data, salt=key_id.encode(), n=cost, r=r, p=p, maxmem=memory, dklen=32)


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
