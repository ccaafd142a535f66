"""Canonical JSON, derived keys, client keys and steps."""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, datetime, timedelta
from types import MappingProxyType
from typing import Any

import pytest

from slotward.engine.errors import ValidationFailed
from slotward.engine.rules.fingerprint import (
    DEFAULT_THOUGHT_FIELDS,
    FINGERPRINT_VERSION,
    MAX_STEP,
    canonical_json,
    check_client_key,
    check_step,
    child_key,
    derive_key,
    hold_intent,
    intent_fingerprint,
    strip_thoughts,
)
from slotward.engine.rules.timenorm import Interval

INTENT = {"attendees": ["usr_a"], "start": "2030-03-31T09:30:00Z", "end": "2030-03-31T10:00:00Z"}


def _key(**overrides: Any) -> str:
    args: dict[str, Any] = {
        "tenant": "t1",
        "workflow": "wf",
        "tool": "place_hold",
        "intent": INTENT,
        "step": None,
    }
    args.update(overrides)
    return derive_key(**args)


def test_constants() -> None:
    assert FINGERPRINT_VERSION == 1
    assert frozenset({"agent_thought", "rationale", "reasoning", "thought"}) == (
        DEFAULT_THOUGHT_FIELDS
    )


# strip_thoughts


def test_strip_thoughts_top_level_only_and_copies() -> None:
    args = {"title": "Sync", "thought": "hmm", "meta": {"thought": "kept"}}
    stripped = strip_thoughts(args, DEFAULT_THOUGHT_FIELDS)
    assert stripped == {"title": "Sync", "meta": {"thought": "kept"}}
    assert args["thought"] == "hmm"
    assert stripped is not args


def test_strip_thoughts_configurable_fields() -> None:
    assert strip_thoughts({"a": 1, "note": 2}, {"note"}) == {"a": 1}
    assert strip_thoughts({"a": 1, "thought": 2}, ()) == {"a": 1, "thought": 2}


# canonical_json


def test_canonical_json_sorts_keys_and_drops_whitespace() -> None:
    assert canonical_json({"b": [1, 2.0, "é"], "a": None}) == '{"a":null,"b":[1,2,"é"]}'.encode()


def test_canonical_json_accepts_any_mapping_and_tuples() -> None:
    doc = MappingProxyType({"b": (1, MappingProxyType({"y": 2, "x": 1})), "a": True})
    assert canonical_json(doc) == b'{"a":true,"b":[1,{"x":1,"y":2}]}'


@pytest.mark.parametrize(
    "doc",
    [
        {"n": 2**53},
        {"n": -(2**53)},
        {"n": float("nan")},
        {"n": float("inf")},
        {"s": "\ud800"},
        {1: "non-string key"},
        {"when": datetime(2030, 1, 1, tzinfo=UTC)},
    ],
)
def test_canonical_json_refuses_what_has_no_canonical_form(doc: object) -> None:
    with pytest.raises(ValidationFailed) as info:
        canonical_json(doc)
    assert info.value.code == "invalid_intent"


# derive_key, intent_fingerprint, child_key


def test_derive_key_is_sha256_of_the_canonical_envelope() -> None:
    envelope = {
        "v": 1,
        "tenant": "t1",
        "workflow": "wf",
        "tool": "place_hold",
        "intent": INTENT,
        "step": None,
    }
    expected = "idem_" + hashlib.sha256(canonical_json(envelope)).hexdigest()
    assert _key() == expected
    assert re.fullmatch(r"idem_[0-9a-f]{64}", expected)


def test_derive_key_ignores_key_order() -> None:
    reordered = dict(reversed(list(INTENT.items())))
    assert list(reordered) != list(INTENT)
    assert _key(intent=reordered) == _key()


@pytest.mark.parametrize(
    "change",
    [
        {"tenant": "t2"},
        {"workflow": "wf2"},
        {"tool": "release_hold"},
        {"step": 0},
        {"step": 1},
        {"intent": {**INTENT, "end": "2030-03-31T10:30:00Z"}},
    ],
)
def test_derive_key_changes_with_every_part(change: dict[str, Any]) -> None:
    assert _key(**change) != _key()


def test_step_zero_and_none_differ() -> None:
    assert _key(step=0) != _key(step=None)


def test_no_concatenation_collisions() -> None:
    assert _key(tenant="ab", workflow="1") != _key(tenant="a", workflow="b1")
    assert _key(workflow="ab", tool="1") != _key(workflow="a", tool="b1")
    assert child_key("ab", "1") != child_key("a", "b1")
    assert intent_fingerprint(tenant="ab", tool="1", intent={}) != intent_fingerprint(
        tenant="a", tool="b1", intent={}
    )


def test_intent_fingerprint_ignores_workflow_and_step() -> None:
    fp = intent_fingerprint(tenant="t1", tool="place_hold", intent=INTENT)
    envelope = {"v": 1, "tenant": "t1", "tool": "place_hold", "intent": INTENT}
    assert fp == hashlib.sha256(canonical_json(envelope)).hexdigest()
    assert fp != intent_fingerprint(tenant="t2", tool="place_hold", intent=INTENT)
    assert fp != intent_fingerprint(tenant="t1", tool="other", intent=INTENT)


def test_child_key() -> None:
    parent = _key()
    commit = child_key(parent, "commit")
    doc = {"v": 1, "parent": parent, "action": "commit"}
    assert commit == "idem_" + hashlib.sha256(canonical_json(doc)).hexdigest()
    assert commit != child_key(parent, "release")
    assert commit != child_key(_key(step=1), "commit")


# check_client_key


@pytest.mark.parametrize(
    "key",
    ["k", "a b", "~!@#$%^&*()_+", "x" * 255, "9f1c-44", "idem_" + "0" * 64],
)
def test_client_key_valid(key: str) -> None:
    assert check_client_key(key) == key


@pytest.mark.parametrize(
    "key",
    ["", " ", " k", "k ", "x" * 256, "tab\tkey", "new\nline", "é", "del\x7f", "nul\x00"],
)
def test_client_key_invalid(key: str) -> None:
    with pytest.raises(ValidationFailed) as info:
        check_client_key(key)
    assert info.value.code == "invalid_idempotency_key"
    assert info.value.extra == {"field": "Idempotency-Key"}


# check_step


@pytest.mark.parametrize("step", [None, 0, 1, 3, MAX_STEP])
def test_step_valid(step: int | None) -> None:
    assert check_step(step) == step


@pytest.mark.parametrize("step", ["3", 3.0, -1, True, False, MAX_STEP + 1, [3], "", b"3"])
def test_step_invalid(step: object) -> None:
    with pytest.raises(ValidationFailed) as info:
        check_step(step)
    assert info.value.code == "invalid_step"
    assert info.value.extra == {"field": "step"}


# hold_intent


def test_hold_intent() -> None:
    start = datetime(2030, 3, 31, 9, 30, tzinfo=UTC)
    interval = Interval(start, start + timedelta(minutes=30, microseconds=1))
    assert hold_intent(["usr_b", "usr_a", "usr_b"], interval) == {
        "attendees": ["usr_a", "usr_b"],
        "start": "2030-03-31T09:30:00Z",
        "end": "2030-03-31T10:00:00.000001Z",
    }
