"""Standard Webhooks signatures: what slotward signs, and how a receiver checks it.

A delivery carries three headers (https://www.standardwebhooks.com):

- ``webhook-id``: the event's id, the same on every attempt (a receiver's dedupe key);
- ``webhook-timestamp``: integer Unix seconds of this attempt;
- ``webhook-signature``: ``v1,<base64 HMAC-SHA256>`` of ``"{id}.{timestamp}.{body}"``
  under the secret's bytes, several space-separated while a secret is rotated.

A secret is ``whsec_`` + standard base64 of its random bytes. Pure: no I/O, the
standard library only; ``verify`` reads the clock only when it is given none.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Final

from slotward.engine.clock import SystemClock

__all__ = [
    "InvalidSignature",
    "new_secret",
    "secret_bytes",
    "sign",
    "signature_header",
    "verify",
]

_PREFIX: Final = "whsec_"
_MIN_SECRET: Final = 24  # bytes; Standard Webhooks asks 24-64, slotward makes 32
_MAX_SECRET: Final = 64
_VERSION: Final = "v1"


class InvalidSignature(ValueError):
    """A webhook that does not verify: refuse it (for receivers; not an API error)."""


def new_secret(raw: bytes) -> str:
    """The ``whsec_`` form of ``raw`` (at least 24 random bytes, e.g. ``os.urandom(32)``)."""
    if not _MIN_SECRET <= len(raw) <= _MAX_SECRET:
        raise ValueError(f"a webhook secret is {_MIN_SECRET} to {_MAX_SECRET} random bytes")
    return _PREFIX + base64.b64encode(raw).decode("ascii")


def secret_bytes(secret: str) -> bytes:
    """The key bytes of a ``whsec_`` secret; ValueError (quoting none of it) if malformed."""
    if not secret.startswith(_PREFIX):
        raise ValueError("a webhook secret starts with 'whsec_'")
    try:
        raw = base64.b64decode(secret[len(_PREFIX) :].encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError):
        raise ValueError("a webhook secret is 'whsec_' and standard base64") from None
    if len(raw) < _MIN_SECRET:
        raise ValueError(f"a webhook secret holds at least {_MIN_SECRET} bytes")
    return raw


def sign(secret: str, msg_id: str, timestamp: int, body: bytes) -> str:
    """``v1,<base64 HMAC-SHA256 of "{msg_id}.{timestamp}." + body>``."""
    return f"{_VERSION},{_digest(secret_bytes(secret), msg_id, timestamp, body)}"


def signature_header(secrets: Sequence[str], msg_id: str, timestamp: int, body: bytes) -> str:
    """The ``webhook-signature`` value: one signature per secret, in the given order."""
    if not secrets:
        raise ValueError("a webhook is signed with at least one secret")
    return " ".join(sign(secret, msg_id, timestamp, body) for secret in secrets)


def verify(
    secret: str,
    headers: Mapping[str, str],
    body: bytes,
    *,
    tolerance_seconds: int = 300,
    now: datetime | None = None,
) -> None:
    """Check a webhook slotward sent you; raise ``InvalidSignature`` unless it is genuine.

    ``headers`` are the request's headers (looked up case-insensitively),
    ``body`` the raw bytes as received (verify before parsing: a re-encoded
    JSON document no longer matches). Refused: a missing ``webhook-id``,
    ``webhook-timestamp`` or ``webhook-signature``; a timestamp that is not an
    integer or is more than ``tolerance_seconds`` away from ``now`` (a
    replayed old delivery; ``now`` is an aware datetime, the system clock when
    None); no ``v1`` signature matching ``secret``. During a
    rotation the header carries one signature per live secret, so either the
    old or the new secret verifies.

    In an aiohttp receiver::

        from slotward.engine.rules.signing import InvalidSignature, verify

        async def receive(request: web.Request) -> web.Response:
            body = await request.read()
            try:
                verify(SECRET, request.headers, body)
            except InvalidSignature:
                return web.Response(status=401)
            event = json.loads(body)  # webhook-id is the event id: dedupe on it
            ...
            return web.Response(status=204)
    """
    if now is not None and now.tzinfo is None:
        raise ValueError("now must be a timezone-aware datetime")
    try:
        key = secret_bytes(secret)
    except ValueError as exc:
        raise InvalidSignature(str(exc)) from None
    msg_id, stamp, signatures = _headers(headers)
    timestamp = _timestamp(stamp)
    current = (now or SystemClock().now()).timestamp()
    if abs(current - timestamp) > tolerance_seconds:
        raise InvalidSignature("webhook-timestamp is outside the tolerance: too old or too new")
    expected = _digest(key, msg_id, timestamp, body).encode("ascii")
    found = False
    for part in signatures.split(" "):
        version, comma, value = part.partition(",")
        # Every candidate is compared, without stopping at the first match.
        if comma and version == _VERSION and hmac.compare_digest(value.encode(), expected):
            found = True
    if not found:
        raise InvalidSignature("no webhook-signature matches the secret")


def _digest(key: bytes, msg_id: str, timestamp: int, body: bytes) -> str:
    signed = f"{msg_id}.{timestamp}.".encode() + body
    return base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode("ascii")


def _headers(headers: Mapping[str, str]) -> tuple[str, str, str]:
    lowered = {name.lower(): value for name, value in headers.items()}
    found = []
    for name in ("webhook-id", "webhook-timestamp", "webhook-signature"):
        value = lowered.get(name)
        if not value:
            raise InvalidSignature(f"the {name} header is missing")
        found.append(value)
    return found[0], found[1], found[2]


def _timestamp(stamp: str) -> int:
    # Integer seconds only, ASCII digits: no sign, fraction, exponent or padding.
    if not (stamp.isascii() and stamp.isdigit()) or len(stamp) > 12:
        raise InvalidSignature("webhook-timestamp is not integer Unix seconds")
    return int(stamp)
