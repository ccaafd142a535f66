"""How API keys are stored: HMAC-SHA256 of the whole key, under the pepper.

A key reads ``sw_<key id>.<secret>`` with 256 random bits of secret: the id
names the row to check, the secret is what a caller proves. Against a secret
that random a slow password hash buys nothing (no guess list finds it, at any
speed), so the stored form is a fast keyed hash, checked in microseconds and
in constant time. The stored form names its scheme, so schemes can change:

- ``hmacp$<digest>``: HMAC-SHA256 under the pepper (``SLOTWARD_KEY_PEPPER``);
- ``hmac$<digest>``: the same under a fixed, public domain-separation key, made
  when no pepper is set. The key only keeps this hash apart from every other
  SHA-256 of the same text; the secret's 256 bits are what protect it;
- ``scrypt$<log2 N>$<r>$<p>$<hash>`` (``scryptp`` when its input was
  peppered): keys made before HMAC. They still verify, slowly, and are stored
  again in the HMAC form of the same pepperedness on their next good use;
- 64 hex digits: keys ``sw_<secret>`` from before key ids (SHA-256 or its
  HMAC under the pepper), found by that hash until revoked.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

__all__ = ["KeyHasher", "legacy_hash", "split_key"]

_KEY = re.compile(r"sw_(key_[0-9a-f]{1,60})\.([A-Za-z0-9_-]{16,128})")
_HMAC = re.compile(r"(hmacp?)\$([A-Za-z0-9_-]{43})")
_SCRYPT = re.compile(r"(scryptp?)\$(\d{1,2})\$(\d{1,2})\$(\d{1,2})\$([A-Za-z0-9_-]{43})")
# Public on purpose: without a pepper the hash is still keyed, by a constant
# that names this use; nothing about it is secret.
_NO_PEPPER = b"slotward api key, no pepper"
_MESSAGE = b"slotward api key v1\x00"
_DECOY_DIGEST = "A" * 43  # no key hashes to it (a 2^-256 chance)


def legacy_hash(secret: str) -> str:
    """The plain SHA-256 a key made before key ids was stored as."""
    return hashlib.sha256(secret.encode()).hexdigest()


def split_key(secret: str) -> str | None:
    """The key id a presented key names, or None for a legacy or malformed key."""
    found = _KEY.fullmatch(secret)
    return found.group(1) if found else None


@dataclass(frozen=True)
class KeyHasher:
    """Makes and checks stored key hashes; ``pepper`` is the server-side secret.

    With a pepper a copy of the database alone does not let a reader test a
    key it found elsewhere. Changing the pepper retires every key made (or
    stored again) under the old one; keys made without one keep working.
    """

    pepper: bytes | None = None

    def new_key(self, key_id: str) -> tuple[str, str]:
        """A fresh key for ``key_id`` and the form to store: ``(secret, stored)``."""
        secret = f"sw_{key_id}.{secrets.token_urlsafe(32)}"
        if split_key(secret) != key_id:
            raise ValueError(f"not a key id: {key_id!r}")
        return secret, self._hmac_form(secret, peppered=self.pepper is not None)

    @property
    def decoy(self) -> str:
        """A stored form in this server's scheme that no key matches.

        Checked for an unknown key id, so that it costs what a wrong secret
        for a real id costs.
        """
        return f"{'hmacp' if self.pepper is not None else 'hmac'}${_DECOY_DIGEST}"

    @staticmethod
    def is_slow(stored: str) -> bool:
        """Whether checking ``stored`` takes a slow hash (keys from before HMAC)."""
        return stored.startswith("scrypt")

    def verify(self, secret: str, key_id: str, stored: str) -> bool:
        """Whether ``secret`` is the key stored as ``stored`` (slow when :meth:`is_slow`)."""
        fast = _HMAC.fullmatch(stored)
        if fast is not None:
            peppered = fast.group(1) == "hmacp"
            if peppered and self.pepper is None:
                self._hmac_form(secret, peppered=False)  # the same work as a refusal below
                return False  # made under a pepper this server does not have
            return hmac.compare_digest(self._hmac_form(secret, peppered), stored)
        slow = _SCRYPT.fullmatch(stored)
        return slow is not None and self._verify_scrypt(secret, key_id, *slow.groups())

    def upgraded(self, secret: str, stored: str) -> str:
        """The HMAC form to store for ``secret``, verified against the scrypt ``stored``.

        It keeps the key's pepperedness: a fleet part-way through setting a
        pepper never loses a key one of its servers could check before.
        """
        return self._hmac_form(secret, peppered=stored.startswith("scryptp"))

    def legacy_candidates(self, secret: str) -> tuple[str, ...]:
        """The fast hashes a key without an id may be stored as, newest first."""
        if self.pepper is None:
            return (legacy_hash(secret),)
        peppered = hmac.new(self.pepper, secret.encode(), hashlib.sha256).hexdigest()
        return (peppered, legacy_hash(secret))

    def _hmac_form(self, secret: str, peppered: bool) -> str:
        key = self.pepper if peppered and self.pepper is not None else _NO_PEPPER
        digest = hmac.new(key, _MESSAGE + secret.encode(), hashlib.sha256).digest()
        return f"{'hmacp' if peppered else 'hmac'}${_b64(digest)}"

    def _verify_scrypt(
        self, secret: str, key_id: str, scheme: str, log_n: str, r: str, p: str, want: str
    ) -> bool:
        peppered = scheme == "scryptp"
        if peppered and self.pepper is None:
            return False
        if not (1 <= int(log_n) <= 18 and 1 <= int(r) <= 16 and 1 <= int(p) <= 4):
            return False  # not a cost this server ever made: refuse rather than pay it
        data = secret.encode()
        if peppered and self.pepper is not None:
            data = hmac.new(self.pepper, data, hashlib.sha256).digest()
        cost, rounds, lanes = 2 ** int(log_n), int(r), int(p)
        memory = 128 * rounds * (cost + lanes + 2) + 1024 * 1024
        digest = hashlib.scrypt(
            data, salt=key_id.encode(), n=cost, r=rounds, p=lanes, maxmem=memory, dklen=32
        )
        return hmac.compare_digest(_b64(digest), want)


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()
