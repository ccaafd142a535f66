"""Intent fingerprints and idempotency keys.

Every key is a SHA-256 over one RFC 8785 canonical JSON document, never over
concatenated strings: ``"ab" + "1"`` and ``"a" + "b1"`` must not collide, and
the order of object keys must not matter. ``FINGERPRINT_VERSION`` is the
schema version inside every document; changing what counts as identity means
a new version, never silently different keys for old requests.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Final

import orjson
import rfc8785

from slotward.engine.errors import ValidationFailed
from slotward.engine.rules.timenorm import Interval, format_instant

__all__ = [
    "CLIENT_PREFIX",
    "DEFAULT_THOUGHT_FIELDS",
    "FINGERPRINT_VERSION",
    "MAX_STEP",
    "canonical_json",
    "check_claimable",
    "check_client_key",
    "check_step",
    "child_key",
    "derive_key",
    "hold_intent",
    "intent_fingerprint",
    "is_derived_key",
    "ledger_key",
    "public_key",
    "strip_thoughts",
]

FINGERPRINT_VERSION: Final = 1
DEFAULT_THOUGHT_FIELDS: Final = frozenset({"agent_thought", "rationale", "reasoning", "thought"})
# Fits a 32-bit signed column and stays far inside JSON's safe integers.
MAX_STEP: Final = 2**31 - 1
_CLIENT_KEY: Final = re.compile(r"[\x21-\x7e](?:[\x20-\x7e]{0,253}[\x21-\x7e])?")


def strip_thoughts(obj: Mapping[str, Any], fields: Collection[str]) -> dict[str, Any]:
    """A copy of ``obj`` without the top-level free-text ``fields``."""
    return {k: v for k, v in obj.items() if k not in fields}


def canonical_json(doc: object) -> bytes:
    """The RFC 8785 canonical JSON bytes of ``doc``.

    Any ``Mapping`` counts as an object and any list or tuple as an array.
    Values outside I-JSON (integers beyond 2**53, NaN, lone surrogates) raise
    ``ValidationFailed`` (``invalid_intent``): they have no canonical form.
    """
    fast = _fast_canonical(doc)
    if fast is not None:
        return fast
    try:
        data: bytes = rfc8785.dumps(_plain(doc))
    # rfc8785 refuses a lone surrogate in a value with its own error, in a key
    # with the codec's.
    except (rfc8785.CanonicalizationError, UnicodeEncodeError) as exc:
        raise ValidationFailed(
            f"the call cannot be fingerprinted as canonical JSON: {exc}",
            code="invalid_intent",
        ) from exc
    return data


def derive_key(
    *,
    tenant: str,
    workflow: str | None,
    tool: str,
    intent: Mapping[str, Any],
    step: int | None,
) -> str:
    """The derived idempotency key of one tool call: ``idem_`` + 64 hex digits.

    ``workflow`` is None only for a generic execution that brings its own key.
    """
    doc = {
        "v": FINGERPRINT_VERSION,
        "tenant": tenant,
        "workflow": workflow,
        "tool": tool,
        "intent": intent,
        "step": step,
    }
    return "idem_" + _sha256(doc)


def intent_fingerprint(*, tenant: str, tool: str, intent: Mapping[str, Any]) -> str:
    """A hex digest of the intent alone, whatever the workflow and step.

    It spots the same intent across workflows and across step drift.
    """
    doc = {"v": FINGERPRINT_VERSION, "tenant": tenant, "tool": tool, "intent": intent}
    return _sha256(doc)


def child_key(parent_key: str, action: str) -> str:
    """The key of a follow-up ``action`` (commit, release) of the call ``parent_key``."""
    doc = {"v": FINGERPRINT_VERSION, "parent": parent_key, "action": action}
    return "idem_" + _sha256(doc)


def check_client_key(value: str) -> str:
    """Check a client's ``Idempotency-Key``: 1-255 printable ASCII characters.

    Inner spaces are allowed, leading and trailing ones are not (they do not
    survive HTTP header parsing). Raises ``ValidationFailed``
    (``invalid_idempotency_key``).
    """
    if _CLIENT_KEY.fullmatch(value) is None:
        raise ValidationFailed(
            "Idempotency-Key must be 1-255 printable ASCII characters,"
            " without leading or trailing spaces",
            code="invalid_idempotency_key",
            extra={"field": "Idempotency-Key"},
        )
    return value


def check_step(value: object) -> int | None:
    """Check an envelope ``step``: absent (``None``) or an integer 0..MAX_STEP.

    Strings (``"3"``), floats (``3.0``) and booleans are refused, not coerced:
    coercion would silently make a different key. Raises ``ValidationFailed``
    (``invalid_step``).
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_STEP:
        raise ValidationFailed(
            f"step must be an integer from 0 to {MAX_STEP}",
            code="invalid_step",
            extra={"field": "step"},
        )
    return value


def hold_intent(attendee_ids: Sequence[str], interval: Interval) -> dict[str, Any]:
    """The identity fields of a hold: sorted attendee ids, UTC start and end."""
    return {
        "attendees": sorted(set(attendee_ids)),
        "start": format_instant(interval.start),
        "end": format_instant(interval.end),
    }


def _sha256(doc: object) -> str:
    return hashlib.sha256(canonical_json(doc)).hexdigest()


# RFC 8785 integers are exact IEEE 754 doubles.
_SAFE_INT: Final = 2**53 - 1


class _NotPlain(Exception):
    """The document holds something only rfc8785 itself may judge."""


def _fast_canonical(doc: object) -> bytes | None:
    """The canonical bytes of the common document, or None to ask rfc8785.

    orjson with sorted keys writes what RFC 8785 writes for objects with
    string keys and string, safe-integer, boolean and null leaves: UTF-8, the
    same escapes (the short ones, else lower-case \\u00xx for control
    characters, nothing else escaped) and the same key order (by UTF-8 bytes,
    which is by code point), as long as no key holds a character beyond
    U+FFFF (RFC 8785 orders keys by UTF-16 units). It is some five times
    faster than Python's own encoder, and a create computes several. Floats,
    big integers, lone surrogates and anything else go to rfc8785, which
    knows their forms or refuses them. rfc8785 is the reference:
    tests/unit/test_fingerprint_properties.py checks the two agree.
    """
    try:
        return orjson.dumps(_checked(doc), option=orjson.OPT_SORT_KEYS)
    except (_NotPlain, orjson.JSONEncodeError):  # a lone surrogate does not encode
        return None


def _checked(doc: object) -> Any:
    # Exact types first (the documents of every call are plain dicts, lists and
    # strings: this runs for each fingerprint), then their subclasses.
    kind = type(doc)
    if kind is str or doc is None or kind is bool:
        return doc
    if kind is int:
        if -_SAFE_INT <= doc <= _SAFE_INT:  # type: ignore[operator]
            return doc
        raise _NotPlain
    if kind is list:
        return [_checked(v) for v in doc]  # type: ignore[attr-defined]
    if kind is dict or isinstance(doc, Mapping):  # a dict without the ABC's check
        out = {}
        for k, v in doc.items():  # type: ignore[attr-defined]  # a dict or a Mapping
            # An ASCII key (isascii is one C call) never reaches beyond U+FFFF.
            if type(k) is not str or (not k.isascii() and k and max(k) > "\uffff"):
                raise _NotPlain
            out[k] = _checked(v)
        return out
    if isinstance(doc, str):
        return doc
    if isinstance(doc, int) and not isinstance(doc, bool):
        raise _NotPlain  # an int subclass: rfc8785 judges it
    if isinstance(doc, list | tuple):
        return [_checked(v) for v in doc]
    raise _NotPlain


def _plain(doc: object) -> Any:
    # rfc8785 knows only dict, list and tuple; MappingProxyType and friends
    # are objects too. Any: rfc8785 itself rejects what is left unsupported.
    if isinstance(doc, Mapping):
        return {k: _plain(v) for k, v in doc.items()}
    if isinstance(doc, list | tuple):
        return [_plain(v) for v in doc]
    return doc


CLIENT_PREFIX = "client:"


_DERIVED_KEY: Final = re.compile(r"idem_[0-9a-f]{64}")


def ledger_key(client_key: str | None, derived: str) -> str:
    """The key a record is stored under.

    Client keys live in their own namespace, so a client cannot pick a key that
    some other call derives (a commit's ``idem_...``) and squat on it. A key of
    the derived form names a derived record: a client sending back a key
    slotward answered means that call (see :func:`check_claimable`).
    """
    if client_key is None or _DERIVED_KEY.fullmatch(client_key):
        return client_key or derived
    return CLIENT_PREFIX + client_key


def check_claimable(stored: str, derived: str) -> None:
    """Refuse to record a new call under a derived-form key that is not its own.

    Called where a call would create its record: a client may send back a key
    slotward derived (a retry; it then finds that record), but never start a
    new record under one, so one public key never names two records.
    """
    if _DERIVED_KEY.fullmatch(stored) and stored != derived:
        raise ValidationFailed(
            "an Idempotency-Key of the form idem_<64 hex digits> is one slotward derives;"
            " it names the call it was derived for, not a new one",
            code="invalid_idempotency_key",
            extra={"field": "Idempotency-Key"},
        )


def is_derived_key(key: str) -> bool:
    return _DERIVED_KEY.fullmatch(key) is not None


def public_key(stored: str) -> str:
    """The key as the client sees it in ``Idempotency-Key`` and in bodies."""
    return stored.removeprefix(CLIENT_PREFIX)
