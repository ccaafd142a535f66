"""Secrets at rest: webhook signing secrets sealed with AES-256-GCM.

A store dump (a backup, a replica, a stolen disk) must not hand out the
secrets that sign slotward's webhooks. Each is sealed under a key derived from
``SLOTWARD_SECRET_KEY`` (HKDF-SHA256; any string of at least 16 bytes), bound
to its ``context`` (the row it belongs to, as associated data: a sealed value
copied to another row does not open there), with a fresh 12-byte nonce:

    v1.<key id>.<urlsafe base64 of nonce + ciphertext + tag>

The key id (8 hex digits of the SHA-256 of the derived key) says which key
sealed it. Rotation: the new key goes into ``SLOTWARD_SECRET_KEY`` and the old
one into ``SLOTWARD_SECRET_KEY_OLD`` (comma-separated, several allowed); old
keys still open, never seal, and ``needs_reseal`` names what to seal again.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from slotward.engine.errors import ConfigError, InvalidRequest

__all__ = ["MIN_KEY_BYTES", "SecretBox", "split_old_keys"]

MIN_KEY_BYTES: Final = 16
_VERSION: Final = "v1"
_INFO: Final = b"slotward secret box v1"
_NONCE: Final = 12
_HEX: Final = "0123456789abcdef"


@dataclass(frozen=True, repr=False)  # repr=False: the keys are never printed
class _Key:
    id: str
    aead: AESGCM


class SecretBox:
    """Seals under the current key; opens under it or any old one."""

    def __init__(self, current: bytes | None, old: Iterable[bytes] = ()) -> None:
        self._current = None if current is None else _derive(current)
        keys = [_derive(raw) for raw in old]
        if self._current is not None:
            keys.insert(0, self._current)
        self._keys = {key.id: key for key in reversed(keys)}  # the current one wins a tie

    @classmethod
    def from_config(cls, key: str | None, old_keys: str | None = None) -> SecretBox:
        """From ``SLOTWARD_SECRET_KEY`` and ``SLOTWARD_SECRET_KEY_OLD`` (ConfigError if short)."""
        for each in [key, *split_old_keys(old_keys)]:
            if each is not None and len(each.encode()) < MIN_KEY_BYTES:
                raise ConfigError(f"a secret key must be at least {MIN_KEY_BYTES} bytes")
        return cls(
            None if key is None else key.encode(),
            [old.encode() for old in split_old_keys(old_keys)],
        )

    def __repr__(self) -> str:
        return f"SecretBox(available={self.available}, keys={len(self._keys)})"

    @property
    def available(self) -> bool:
        """Whether a current key is set: without one nothing can be sealed."""
        return self._current is not None

    def seal(self, plaintext: str, context: str) -> str:
        """``plaintext`` sealed for ``context``; InvalidRequest ``secret_key_required``
        when no key is configured."""
        if self._current is None:
            raise InvalidRequest(
                "webhook secrets are stored encrypted: set SLOTWARD_SECRET_KEY "
                "(at least 16 bytes) on the server",
                code="secret_key_required",
            )
        nonce = os.urandom(_NONCE)
        sealed = self._current.aead.encrypt(nonce, plaintext.encode(), context.encode())
        text = base64.urlsafe_b64encode(nonce + sealed).decode("ascii").rstrip("=")
        return f"{_VERSION}.{self._current.id}.{text}"

    def open(self, sealed: str, context: str) -> str:
        """The plaintext of ``sealed``; ValueError (naming no secret) if it does not open."""
        key_id, blob = self._parts(sealed)
        key = self._keys.get(key_id)
        if key is None:
            raise ValueError(f"sealed under key {key_id}, which this server does not have")
        try:
            plain = key.aead.decrypt(blob[:_NONCE], blob[_NONCE:], context.encode())
        except InvalidTag:
            raise ValueError(
                "a sealed secret does not open: tampered, or another context"
            ) from None
        return plain.decode()

    def needs_reseal(self, sealed: str) -> bool:
        """Whether ``sealed`` is under another key than the current one (rotation)."""
        key_id, _ = self._parts(sealed)
        return self._current is None or key_id != self._current.id

    @staticmethod
    def _parts(sealed: str) -> tuple[str, bytes]:
        version, _, rest = sealed.partition(".")
        key_id, _, text = rest.partition(".")
        if version != _VERSION or len(key_id) != 8 or key_id.strip(_HEX) or not text:
            raise ValueError("not a sealed secret (v1.<key id>.<data>)")
        try:
            blob = base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
        except (binascii.Error, ValueError):
            raise ValueError("not a sealed secret: its data is not base64") from None
        if len(blob) < _NONCE + 16:
            raise ValueError("not a sealed secret: too short")
        return key_id, blob


def split_old_keys(old_keys: str | None) -> list[str]:
    """The keys of ``SLOTWARD_SECRET_KEY_OLD``: comma-separated, each stripped."""
    if old_keys is None or old_keys.strip() == "":
        return []
    return [part.strip() for part in old_keys.split(",")]


def _derive(raw: bytes) -> _Key:
    derived = HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=_INFO).derive(raw)
    return _Key(hashlib.sha256(derived).hexdigest()[:8], AESGCM(derived))
