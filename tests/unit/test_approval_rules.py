"""The rules of approvals: what a request may carry, the state table, the policy's rules."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slotward.engine.approvals import Approval, ApprovalRules, ApprovalStatus
from slotward.engine.errors import Conflict, ValidationFailed
from slotward.engine.model import Hold, HoldStatus
from slotward.engine.rules.approvals import (
    MAX_EVIDENCE_BYTES,
    Decision,
    apply_decision,
    check_action,
    check_evidence,
    check_note,
    check_summary,
    expire,
    gate_summary,
    matched_rules,
    parse_rules,
    rules_document,
)

T0 = datetime(2030, 10, 1, 9, 0, tzinfo=UTC)


def approval(status: ApprovalStatus = ApprovalStatus.PENDING, **changes: Any) -> Approval:
    base = Approval(
        id="appr_1", tenant="acme", key="idem_" + "0" * 64, workflow_id="wf", requested_by="a",
        summary="s", evidence={}, action=None, status=status, created_at=T0, updated_at=T0,
        expires_at=T0 + timedelta(hours=1), audit_seq=1,
    )  # fmt: skip
    return replace(base, **changes)


def hold(**changes: Any) -> Hold:
    base = Hold(
        id="hold_1", key="idem_" + "1" * 64, tenant="acme", workflow_id="wf", agent_id="a",
        attendees=("att_a", "att_b"), start=T0 + timedelta(hours=1),
        end=T0 + timedelta(hours=1, minutes=30), title="Board sync", description=None,
        priority=50, status=HoldStatus.HELD, expires_at=T0 + timedelta(minutes=5), token=1,
        intent_fp="f", created_at=T0, updated_at=T0, audit_seq=1,
    )  # fmt: skip
    return replace(base, **changes)


# -- the state table: every status seen x every decision --------------------------

APPROVE = Decision("approve", "rev", "ok")
DENY = Decision("deny", "rev", None)


@pytest.mark.parametrize(
    ("status", "decision", "outcome"),
    [
        (ApprovalStatus.PENDING, APPROVE, ApprovalStatus.APPROVED),
        (ApprovalStatus.PENDING, DENY, ApprovalStatus.DENIED),
        (ApprovalStatus.APPROVED, APPROVE, "unchanged"),
        (ApprovalStatus.DENIED, DENY, "unchanged"),
        (ApprovalStatus.APPROVED, DENY, "approval_decided"),
        (ApprovalStatus.DENIED, APPROVE, "approval_decided"),
        (ApprovalStatus.EXPIRED, APPROVE, "approval_expired"),
        (ApprovalStatus.EXPIRED, DENY, "approval_expired"),
    ],
)
def test_every_status_meets_every_decision(
    status: ApprovalStatus, decision: Decision, outcome: ApprovalStatus | str
) -> None:
    before = approval(status)
    now = T0 + timedelta(minutes=1)
    if isinstance(outcome, ApprovalStatus):
        after, changed = apply_decision(before, decision, now)
        assert changed
        assert after.status is outcome
        assert (after.decided_by, after.decided_at, after.note) == ("rev", now, decision.note)
    elif outcome == "unchanged":
        assert apply_decision(before, decision, now) == (before, False)
    else:
        with pytest.raises(Conflict) as refused:
            apply_decision(before, decision, now)
        assert refused.value.code == outcome


def test_a_pending_approval_past_its_expiry_reads_expired_and_refuses_decisions() -> None:
    pending = approval()
    at_expiry = pending.expires_at
    assert pending.status_at(at_expiry - timedelta(microseconds=1)) is ApprovalStatus.PENDING
    assert pending.status_at(at_expiry) is ApprovalStatus.EXPIRED
    with pytest.raises(Conflict) as refused:
        apply_decision(pending, APPROVE, at_expiry)
    assert refused.value.code == "approval_expired"


def test_expire_marks_only_pending_approvals_past_their_expiry() -> None:
    pending = approval()
    assert expire(pending, pending.expires_at - timedelta(seconds=1)) == (pending, False)
    moved, changed = expire(pending, pending.expires_at)
    assert changed
    assert moved.status is ApprovalStatus.EXPIRED
    for status in (ApprovalStatus.APPROVED, ApprovalStatus.DENIED, ApprovalStatus.EXPIRED):
        decided = approval(status)
        assert expire(decided, decided.expires_at + timedelta(days=1)) == (decided, False)


# -- what a request may carry ------------------------------------------------------


@pytest.mark.parametrize(
    "summary",
    ["", "   ", "two\nlines", "tab\there", "cr\r", "sep\u2028x", "para\u2029x", "x" * 201],
)
def test_a_summary_is_one_line_of_at_most_200_characters(summary: str) -> None:
    with pytest.raises(ValidationFailed) as refused:
        check_summary(summary)
    assert refused.value.extra["field"] == "summary"


def test_a_summary_of_200_characters_any_script_is_taken() -> None:
    assert check_summary("é" * 200) == "é" * 200
    assert check_summary("Refund 120 € — order 8812") == "Refund 120 € — order 8812"


def test_a_note_may_span_lines_up_to_1000_characters() -> None:
    assert check_note("a\nb") == "a\nb"
    assert check_note(None) is None
    with pytest.raises(ValidationFailed):
        check_note("x" * 1001)


def test_evidence_is_any_json_up_to_32_kib_as_canonical_json() -> None:
    for value in (None, 1, "s", [1, 2], {"a": {"b": [1.5, None]}}):
        assert check_evidence(value) == value
    # A string whose canonical form (quotes included) is exactly the limit.
    assert check_evidence("x" * (MAX_EVIDENCE_BYTES - 2)) is not None
    with pytest.raises(ValidationFailed) as refused:
        check_evidence("x" * (MAX_EVIDENCE_BYTES - 1))
    assert refused.value.extra["field"] == "evidence"


@pytest.mark.parametrize(
    "action",
    [
        {},
        {"type": ""},
        {"type": 3},
        {"type": "x" * 101},
        {"type": "hold.commit"},
        {"type": "hold.commit", "hold_id": 7},
        {"type": "hold.commit", "hold_id": "hold_1", "extra": 1},
        {"type": "refund", "blob": "x" * 5000},
    ],
)
def test_an_action_needs_a_type_and_a_hold_commit_names_only_its_hold(
    action: dict[str, Any],
) -> None:
    with pytest.raises(ValidationFailed):
        check_action(action)


def test_free_form_and_hold_actions_are_taken() -> None:
    assert check_action(None) is None
    assert check_action({"type": "refund", "order": 8812}) == {"type": "refund", "order": 8812}
    gated = {"type": "hold.commit", "hold_id": "hold_1"}
    assert check_action(gated) == gated


# -- the tenant's policy -----------------------------------------------------------


def test_domains_are_normalized_deduplicated_and_sorted() -> None:
    rules = parse_rules({"outside_domains": ["Example.COM", "@example.com", "bücher.example"]})
    assert rules.outside_domains == ("example.com", "xn--bcher-kva.example")
    assert rules_document(rules) == {"outside_domains": ["example.com", "xn--bcher-kva.example"]}
    with pytest.raises(ValidationFailed) as refused:
        parse_rules({"outside_domains": ["not a domain"]})
    assert refused.value.extra["field"] == "require_approval.outside_domains"


def test_no_rule_set_matches_nothing() -> None:
    assert matched_rules(ApprovalRules(), hold(), {}) == []
    assert rules_document(ApprovalRules()) == {}


def test_each_rule_matches_at_its_edge() -> None:
    two = hold()  # 2 attendees, 30 minutes, priority 50
    assert matched_rules(ApprovalRules(attendees_more_than=2), two, {}) == []
    assert len(matched_rules(ApprovalRules(attendees_more_than=1), two, {})) == 1
    assert matched_rules(ApprovalRules(longer_than_minutes=30), two, {}) == []
    assert len(matched_rules(ApprovalRules(longer_than_minutes=29), two, {})) == 1
    assert matched_rules(ApprovalRules(priority_at_least=51), two, {}) == []
    assert len(matched_rules(ApprovalRules(priority_at_least=50), two, {})) == 1


def test_an_attendee_outside_the_domains_or_without_an_email_matches() -> None:
    rules = ApprovalRules(outside_domains=("example.com",))
    inside = {"att_a": ("a@example.com",), "att_b": ("b@eu.example.com", "b@gmail.com")}
    assert matched_rules(rules, hold(), inside) == []
    outside = {"att_a": ("a@example.com",), "att_b": ("b@example.com.evil.org",)}
    assert "att_b" in matched_rules(rules, hold(), outside)[0]
    unknown = {"att_a": ("a@example.com",)}  # att_b known by id only
    assert "att_b" in matched_rules(rules, hold(), unknown)[0]


@given(st.text(max_size=400))
def test_a_gated_commits_summary_is_always_a_valid_summary(title: str) -> None:
    assert check_summary(gate_summary(hold(title=title))) is not None


def test_a_gated_commits_summary_says_what_when_and_how_many() -> None:
    assert gate_summary(hold()) == "Commit 'Board sync': 2030-10-01 10:00–10:30 UTC, 2 attendees"
    overnight = hold(title="", attendees=("att_a",), end=T0 + timedelta(days=1))
    assert (
        gate_summary(overnight)
        == "Commit hold hold_1: 2030-10-01 10:00–2030-10-02 09:00 UTC, 1 attendee"
    )
