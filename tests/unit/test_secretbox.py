"""Webhook secrets sealed at rest (api/secretbox.py)."""

from __future__ import annotations

import base64

import pytest

from slotward.api.config import Config
from slotward.api.secretbox import SecretBox
from slotward.engine.errors import ConfigError, InvalidRequest

KEY = "correct horse battery staple"
OLD = "an older key that is long enough"
SECRET = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
CONTEXT = "webhook:wh_1"


def test_a_sealed_secret_opens_with_its_context() -> None:
    box = SecretBox.from_config(KEY)
    sealed = box.seal(SECRET, CONTEXT)
    assert SECRET not in sealed
    assert box.open(sealed, CONTEXT) == SECRET
    assert SecretBox.from_config(KEY).open(sealed, CONTEXT) == SECRET  # another process


def test_the_sealed_form_names_its_version_and_key() -> None:
    sealed = SecretBox.from_config(KEY).seal(SECRET, CONTEXT)
    version, key_id, data = sealed.split(".")
    assert version == "v1"
    assert len(key_id) == 8
    assert int(key_id, 16) >= 0
    blob = base64.urlsafe_b64decode(data + "=" * (-len(data) % 4))
    assert len(blob) == 12 + len(SECRET) + 16  # nonce, ciphertext, tag


def test_each_seal_has_a_fresh_nonce() -> None:
    box = SecretBox.from_config(KEY)
    assert box.seal(SECRET, CONTEXT) != box.seal(SECRET, CONTEXT)


def test_another_context_does_not_open() -> None:
    box = SecretBox.from_config(KEY)
    sealed = box.seal(SECRET, CONTEXT)
    with pytest.raises(ValueError, match="does not open") as caught:
        box.open(sealed, "webhook:wh_2")
    assert SECRET not in str(caught.value)


@pytest.mark.parametrize("position", [0, 5, 20, -1])
def test_a_tampered_seal_does_not_open(position: int) -> None:
    box = SecretBox.from_config(KEY)
    version, key_id, data = box.seal(SECRET, CONTEXT).split(".")
    blob = bytearray(base64.urlsafe_b64decode(data + "=" * (-len(data) % 4)))
    blob[position] ^= 0x01
    tampered = f"{version}.{key_id}.{base64.urlsafe_b64encode(bytes(blob)).decode()}"
    with pytest.raises(ValueError, match="does not open"):
        box.open(tampered, CONTEXT)


@pytest.mark.parametrize(
    "sealed",
    [
        "",
        "v1",
        "v1.abcdef12",
        "v2.abcdef12.AAAA",
        "v1.xyz.AAAA",
        "v1.ABCDEF12.AAAA",
        "v1.abcdef12.AA",
    ],
)
def test_a_malformed_seal_is_refused(sealed: str) -> None:
    with pytest.raises(ValueError, match="not a sealed secret"):
        SecretBox.from_config(KEY).open(sealed, CONTEXT)


def test_a_seal_under_an_unknown_key_is_refused() -> None:
    sealed = SecretBox.from_config(OLD).seal(SECRET, CONTEXT)
    with pytest.raises(ValueError, match="does not have") as caught:
        SecretBox.from_config(KEY).open(sealed, CONTEXT)
    assert OLD not in str(caught.value)
    assert SECRET not in str(caught.value)


def test_an_old_key_opens_but_never_seals() -> None:
    before = SecretBox.from_config(OLD)
    sealed = before.seal(SECRET, CONTEXT)
    after = SecretBox.from_config(KEY, f"{OLD}, yet another old key here")
    assert after.open(sealed, CONTEXT) == SECRET
    assert after.needs_reseal(sealed)
    resealed = after.seal(SECRET, CONTEXT)
    assert not after.needs_reseal(resealed)
    assert resealed.split(".")[1] != sealed.split(".")[1]
    assert SecretBox.from_config(KEY).open(resealed, CONTEXT) == SECRET


def test_old_keys_alone_open_but_nothing_seals() -> None:
    sealed = SecretBox.from_config(OLD).seal(SECRET, CONTEXT)
    box = SecretBox.from_config(None, OLD)
    assert not box.available
    assert box.open(sealed, CONTEXT) == SECRET
    assert box.needs_reseal(sealed)


def test_without_a_key_nothing_is_sealed() -> None:
    box = SecretBox.from_config(None)
    assert not box.available
    with pytest.raises(InvalidRequest) as caught:
        box.seal(SECRET, CONTEXT)
    assert caught.value.code == "secret_key_required"
    assert "SLOTWARD_SECRET_KEY" in caught.value.detail


@pytest.mark.parametrize(("key", "old"), [("short", None), (KEY, "short"), (KEY, f"{OLD},,")])
def test_a_short_key_is_refused(key: str, old: str | None) -> None:
    with pytest.raises(ConfigError, match="at least 16 bytes"):
        SecretBox.from_config(key, old)


def test_the_box_prints_no_key() -> None:
    box = SecretBox.from_config(KEY, OLD)
    assert KEY not in repr(box)
    assert OLD not in repr(box)


def test_config_reads_the_old_keys_checks_them_and_never_prints_them() -> None:
    config = Config.from_env({"SLOTWARD_SECRET_KEY": KEY, "SLOTWARD_SECRET_KEY_OLD": OLD})
    assert config.secret_key_old == OLD
    assert OLD not in repr(config)
    config.policy()
    with pytest.raises(ConfigError, match="SLOTWARD_SECRET_KEY_OLD"):
        Config.from_env({"SLOTWARD_SECRET_KEY_OLD": f"{OLD},short"}).policy()
