"""Keys are a stored contract: the same call must derive the same key forever.

A record written today is looked up by the key a retry derives next month. If
the derivation changes (a field renamed, added, reordered into a different
document), every stored key is silently burned: retries execute twice. These
tests write the canonical documents out by hand, so any such change fails
here; docs/idempotency.md says how to change identity fields properly (a new
``v``, with a transition).
"""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime

from slotward.engine.model import Principal
from slotward.engine.rules.fingerprint import (
    FINGERPRINT_VERSION,
    child_key,
    derive_key,
    hold_intent,
)
from slotward.engine.rules.timenorm import Interval
from slotward.engine.usecases.executions import ExecutionRequest


def _key(canonical: str) -> str:
    return "idem_" + hashlib.sha256(canonical.encode()).hexdigest()


def test_the_version_is_still_one() -> None:
    assert FINGERPRINT_VERSION == 1  # a new version needs the transition in docs/idempotency.md


def test_a_hold_key_is_the_hash_of_this_exact_document() -> None:
    span = Interval(
        datetime(2030, 10, 14, 14, tzinfo=UTC), datetime(2030, 10, 14, 14, 30, tzinfo=UTC)
    )
    intent = hold_intent(["alex", "alex"], span)
    key = derive_key(
        tenant="acme", workflow="wf-42", tool="create_calendar_hold", intent=intent, step=3
    )
    assert key == _key(
        '{"intent":{"attendees":["alex"],"end":"2030-10-14T14:30:00Z",'
        '"start":"2030-10-14T14:00:00Z"},"step":3,"tenant":"acme",'
        '"tool":"create_calendar_hold","v":1,"workflow":"wf-42"}'
    )
    assert key == "idem_f4ac6d7cbe9d0bac83709e871eca91a6318cbcdb92dab6d124efcea3866e155f"
    assert child_key(key, "commit") == _key(f'{{"action":"commit","parent":"{key}","v":1}}')


def test_an_execution_key_is_the_hash_of_this_exact_document() -> None:
    principal = Principal("acme", "agent-a", "agent", 50)
    arguments = {"to": ["ana@example.com"], "n": 1.5}
    req = ExecutionRequest(principal, "wf-mail", 1, "send_email", arguments, lease_seconds=30)
    assert req.keys()[0] == _key(
        '{"intent":{"arguments":{"n":1.5,"to":["ana@example.com"]}},"step":1,'
        '"tenant":"acme","tool":"send_email","v":1,"workflow":"wf-mail"}'
    )
    anonymous = ExecutionRequest(principal, None, None, "refund", {}, 30, client_key="k-1")
    assert anonymous.keys() == (
        "client:k-1",
        _key(
            '{"intent":{"arguments":{}},"step":null,"tenant":"acme","tool":"refund","v":1,'
            '"workflow":null}'
        ),
    )
