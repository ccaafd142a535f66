"""Standard Webhooks signatures, cross-checked with the reference verifier.

``standardwebhooks`` reads the wall clock, so the cross-checks sign with the
current time; the rest of the tests pass ``now`` in.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
from datetime import UTC, datetime, timedelta

import pytest
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from slotward.engine.rules.signing import (
    InvalidSignature,
    new_secret,
    secret_bytes,
    sign,
    signature_header,
    verify,
)

BODY = json.dumps({"type": "hold.committed", "data": {"id": "hold_1", "seq": 2}}).encode()
MSG = "evt_0192c0ffee01"
NOW = datetime(2030, 10, 14, 14, 0, tzinfo=UTC)
STAMP = int(NOW.timestamp())


def _secret() -> str:
    return new_secret(os.urandom(32))


def _headers(secrets: list[str], msg_id: str = MSG, stamp: int = STAMP) -> dict[str, str]:
    return {
        "webhook-id": msg_id,
        "webhook-timestamp": str(stamp),
        "webhook-signature": signature_header(secrets, msg_id, stamp, BODY),
    }


def test_a_secret_is_whsec_and_base64_of_its_bytes() -> None:
    raw = os.urandom(32)
    secret = new_secret(raw)
    assert secret.startswith("whsec_")
    assert base64.b64decode(secret[6:]) == raw == secret_bytes(secret)


@pytest.mark.parametrize("size", [0, 16, 23, 65])
def test_a_secret_of_too_few_or_many_bytes_is_refused(size: int) -> None:
    with pytest.raises(ValueError, match="random bytes"):
        new_secret(b"x" * size)


@pytest.mark.parametrize(
    "secret",
    ["", "whsec_", "sk_" + "A" * 44, "whsec_not base64!", "whsec_" + "QUFB", "whsec_é"],
    ids=["empty", "bare", "prefix", "not-base64", "short", "non-ascii"],
)
def test_a_malformed_secret_is_refused_without_quoting_it(secret: str) -> None:
    with pytest.raises(ValueError, match="webhook secret") as caught:
        secret_bytes(secret)
    assert secret[6:] == "" or secret[6:] not in str(caught.value)


def test_the_signature_is_hmac_sha256_of_id_timestamp_body() -> None:
    secret = _secret()
    mac = hmac.new(secret_bytes(secret), f"{MSG}.{STAMP}.".encode() + BODY, hashlib.sha256)
    assert sign(secret, MSG, STAMP, BODY) == "v1," + base64.b64encode(mac.digest()).decode()


def test_ours_verifies_with_standardwebhooks() -> None:
    secret = _secret()
    now = datetime.now(UTC)
    headers = _headers([secret], stamp=int(now.timestamp()))
    assert Webhook(secret).verify(BODY, headers) == json.loads(BODY)


def test_theirs_verifies_with_ours() -> None:
    secret = _secret()
    now = datetime.now(UTC).replace(microsecond=0)
    headers = {
        "Webhook-Id": MSG,
        "Webhook-Timestamp": str(int(now.timestamp())),
        "Webhook-Signature": Webhook(secret).sign(MSG, now, BODY.decode()),
    }
    verify(secret, headers, BODY)  # default now: the system clock
    verify(secret, headers, BODY, now=now)


def test_during_rotation_either_secret_verifies_on_both_sides() -> None:
    old, new = _secret(), _secret()
    now = datetime.now(UTC)
    headers = _headers([new, old], stamp=int(now.timestamp()))
    assert len(headers["webhook-signature"].split(" ")) == 2
    for secret in (old, new):
        verify(secret, headers, BODY, now=now)
        Webhook(secret).verify(BODY, headers)
    with pytest.raises(InvalidSignature):
        verify(_secret(), headers, BODY, now=now)
    with pytest.raises(WebhookVerificationError):
        Webhook(_secret()).verify(BODY, headers)


def test_headers_are_looked_up_in_any_case() -> None:
    secret = _secret()
    headers = {name.upper(): value for name, value in _headers([secret]).items()}
    verify(secret, headers, BODY, now=NOW)


@pytest.mark.parametrize(
    "change",
    ["body", "id", "timestamp", "signature", "version"],
)
def test_a_tampered_delivery_is_refused(change: str) -> None:
    secret = _secret()
    headers = _headers([secret])
    body = BODY
    if change == "body":
        body = BODY.replace(b'"seq": 2', b'"seq": 3')
    elif change == "id":
        headers["webhook-id"] = MSG + "x"
    elif change == "timestamp":
        headers["webhook-timestamp"] = str(STAMP + 1)
    elif change == "signature":
        sig = headers["webhook-signature"]
        headers["webhook-signature"] = sig[:-2] + ("AA" if sig[-2:] != "AA" else "BB")
    else:
        headers["webhook-signature"] = "v2," + headers["webhook-signature"][3:]
    with pytest.raises(InvalidSignature, match="no webhook-signature matches"):
        verify(secret, headers, body, now=NOW)


@pytest.mark.parametrize("offset", [-301, 301, -86400, 10**6])
def test_a_timestamp_past_the_tolerance_is_refused(offset: int) -> None:
    secret = _secret()
    headers = _headers([secret], stamp=STAMP + offset)
    with pytest.raises(InvalidSignature, match="tolerance"):
        verify(secret, headers, BODY, now=NOW)


@pytest.mark.parametrize("offset", [-300, 0, 300])
def test_a_timestamp_within_the_tolerance_verifies(offset: int) -> None:
    secret = _secret()
    verify(secret, _headers([secret], stamp=STAMP + offset), BODY, now=NOW)


def test_the_tolerance_can_be_narrowed() -> None:
    secret = _secret()
    headers = _headers([secret], stamp=STAMP - 10)
    with pytest.raises(InvalidSignature, match="tolerance"):
        verify(secret, headers, BODY, now=NOW, tolerance_seconds=5)
    verify(secret, headers, BODY, now=NOW - timedelta(seconds=6), tolerance_seconds=5)


@pytest.mark.parametrize("stamp", ["", "1.5e9", "-1", "+1900000000", "1900000000.0", " 19", "١٢"])
def test_a_timestamp_that_is_not_integer_seconds_is_refused(stamp: str) -> None:
    secret = _secret()
    headers = _headers([secret]) | {"webhook-timestamp": stamp}
    with pytest.raises(InvalidSignature):
        verify(secret, headers, BODY, now=NOW)


@pytest.mark.parametrize("missing", ["webhook-id", "webhook-timestamp", "webhook-signature"])
def test_a_missing_header_is_refused(missing: str) -> None:
    secret = _secret()
    headers = _headers([secret])
    del headers[missing]
    with pytest.raises(InvalidSignature, match=f"the {missing} header is missing"):
        verify(secret, headers, BODY, now=NOW)


def test_a_garbled_signature_list_is_refused_not_crashed() -> None:
    secret = _secret()
    headers = _headers([secret]) | {"webhook-signature": "v1 ,,, v1,%%% nonsense"}
    with pytest.raises(InvalidSignature):
        verify(secret, headers, BODY, now=NOW)


def test_a_malformed_secret_does_not_verify() -> None:
    with pytest.raises(InvalidSignature):
        verify("whsec_short", _headers([_secret()]), BODY, now=NOW)


def test_signing_needs_a_secret() -> None:
    with pytest.raises(ValueError, match="at least one secret"):
        signature_header([], MSG, STAMP, BODY)


def test_a_naive_now_is_refused() -> None:
    secret = _secret()
    with pytest.raises(ValueError, match="timezone-aware"):
        verify(secret, _headers([secret]), BODY, now=NOW.replace(tzinfo=None))
