"""Approvals on the in-memory fakes: open, decide, expire, and the commit gate.

Each call runs in its own unit of work over one shared ``State``, as the store
runs it; time moves only when a test advances the clock.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest

from slotward.engine.errors import Conflict, Forbidden, NotFound, ValidationFailed
from slotward.engine.model import HoldStatus, Principal, Reply
from slotward.engine.rules.approvals import Decision
from slotward.engine.rules.audit import verify_chain
from slotward.engine.usecases.approval_policy import get_policy, put_policy
from slotward.engine.usecases.approvals import (
    ApprovalRequest,
    DecisionRequest,
    decide_approval,
    expire_due_approvals,
    get_approval,
    list_approvals,
    request_approval,
)
from tests.unit.test_usecases import ALICE, BOB, T0, TENANT, TTL, World, request

REVIEWER = Principal(TENANT, "ana", "reviewer", 0)
ADMIN = Principal(TENANT, "ops", "admin", 0)
OTHER_TENANT = Principal("globex", "ana", "reviewer", 0)


@dataclass
class Desk(World):
    """The world of tests/unit/test_usecases.py, with approvals' calls."""

    asked: list[str] = field(default_factory=list)

    def ask(self, principal: Principal = ALICE, **fields: Any) -> Reply:
        req = ApprovalRequest(
            principal=principal,
            workflow_id=fields.get("workflow_id", "wf-1"),
            step=fields.get("step"),
            summary=fields.get("summary", "Refund 120 EUR"),
            evidence=fields.get("evidence", {"order": 8812}),
            action=fields.get("action"),
            expires_in=fields.get("expires_in", timedelta(hours=1)),
            client_key=fields.get("client_key"),
        )
        return request_approval(self.uow(), req, self.policy, self.clock, self.ids)

    def decide(
        self, approval_id: str, kind: str = "approve", by: Principal = REVIEWER, note: str = ""
    ) -> Reply:
        decision = Decision("approve" if kind == "approve" else "deny", by.agent_id, note or None)
        req = DecisionRequest(by, approval_id, decision)
        return decide_approval(self.uow(), req, self.policy, self.clock, self.ids)

    def read(self, approval_id: str, by: Principal = ALICE) -> dict[str, Any]:
        return get_approval(self.uow(), by, approval_id, self.clock.now())[0]

    def require(self, **rules: Any) -> None:
        put_policy(self.uow(), ADMIN, rules, self.policy, self.clock)

    def events(self, prefix: str = "approval.") -> list[str]:
        return [e.type for e in self.state.outbox if e.type.startswith(prefix)]

    def actions(self) -> list[str]:
        return [e.action for e in self.audit()]


@pytest.fixture
def desk() -> Desk:
    return Desk()


def body(reply: Reply) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(reply.body)
    return doc


def placed(desk: Desk, **kwargs: Any) -> dict[str, Any]:
    return body(desk.place(request(**kwargs)))


# -- opening one ------------------------------------------------------------------


def test_a_request_opens_a_pending_approval_with_its_audit_entry_and_event(desk: Desk) -> None:
    reply = desk.ask()
    doc = body(reply)
    assert reply.created
    assert not reply.replayed
    assert reply.approval_id == doc["id"]
    assert doc["status"] == "pending"
    assert doc["requested_by"] == ALICE.agent_id
    assert doc["expires_at"] == "2030-10-01T10:00:00Z"
    assert doc["evidence"] == {"order": 8812}
    assert desk.actions() == ["approval.request"]
    assert desk.events() == ["approval.requested"]
    assert doc["audit_seq"] == desk.audit()[-1].seq


def test_a_retry_that_rewords_the_summary_replays_the_first_answer(desk: Desk) -> None:
    first = desk.ask(summary="Refund 120 EUR")
    again = desk.ask(summary="Please refund the 120 euros")
    assert again.replayed
    assert again.body == first.body
    assert again.key == first.key
    assert again.approval_status == "pending"
    other = desk.ask(evidence={"order": 8813})  # another intent: another approval
    assert other.key != first.key
    assert not other.replayed
    assert len(desk.state.approvals) == 2
    assert desk.events() == ["approval.requested"] * 2


def test_a_new_step_asks_again_and_a_reused_client_key_is_refused(desk: Desk) -> None:
    first = desk.ask(step=1)
    assert desk.ask(step=2).key != first.key
    desk.ask(client_key="k-1")
    with pytest.raises(ValidationFailed) as refused:
        desk.ask(client_key="k-1", evidence={"other": True})
    assert refused.value.code == "idempotency_key_reused"


def test_a_hold_commit_approval_is_the_holds_own_whoever_words_it(desk: Desk) -> None:
    hold = placed(desk)
    action = {"type": "hold.commit", "hold_id": hold["id"]}
    first = desk.ask(action=action, workflow_id="wf-x", step=3, summary="one")
    again = desk.ask(action=action, workflow_id="wf-y", step=9, summary="two", evidence=[1])
    assert again.replayed
    assert again.body == first.body
    assert body(first)["workflow_id"] == "wf-1"  # the hold's workflow
    assert body(first)["hold_id"] == hold["id"]


def test_only_the_holds_agent_may_ask_and_only_for_a_held_hold(desk: Desk) -> None:
    hold = placed(desk)
    action = {"type": "hold.commit", "hold_id": hold["id"]}
    with pytest.raises(Forbidden):
        desk.ask(BOB, action=action)
    with pytest.raises(NotFound):
        desk.ask(action={"type": "hold.commit", "hold_id": "hold_nope"})
    desk.clock.advance(TTL)  # the hold lapsed: an approval would revive it
    with pytest.raises(Conflict) as refused:
        desk.ask(action=action)
    assert refused.value.code == "hold_expired"
    assert desk.state.approvals == {}


def test_a_pending_approval_keeps_its_hold_alive_until_its_own_expiry(desk: Desk) -> None:
    hold = placed(desk)
    desk.ask(action={"type": "hold.commit", "hold_id": hold["id"]}, expires_in=timedelta(hours=2))
    desk.clock.advance(TTL + 60)
    assert desk.hold(hold["id"]).status_at(desk.clock.now()) is HoldStatus.HELD
    assert desk.expire() == 0
    desk.clock.advance(2 * 3600)
    assert desk.hold(hold["id"]).status_at(desk.clock.now()) is HoldStatus.EXPIRED


# -- deciding ----------------------------------------------------------------------


def test_a_reviewer_approves_once_and_the_same_decision_replays(desk: Desk) -> None:
    approval_id = body(desk.ask())["id"]
    desk.clock.advance(30)
    first = desk.decide(approval_id, note="fine")
    doc = body(first)
    assert doc["status"] == "approved"
    assert doc["decided_by"] == "ana"
    assert doc["note"] == "fine"
    assert doc["decided_at"] == "2030-10-01T09:00:30Z"
    again = desk.decide(approval_id, by=ADMIN, note="another note")
    assert again.replayed
    assert again.body == first.body
    assert again.key == first.key
    with pytest.raises(Conflict) as refused:
        desk.decide(approval_id, "deny")
    assert refused.value.code == "approval_decided"
    assert desk.actions() == ["approval.request", "approval.approve"]
    assert desk.events() == ["approval.requested", "approval.approved"]


def test_a_denial_is_recorded_and_read_back(desk: Desk) -> None:
    approval_id = body(desk.ask())["id"]
    desk.decide(approval_id, "deny", note="no")
    assert desk.read(approval_id)["status"] == "denied"
    assert desk.actions()[-1] == "approval.deny"
    assert desk.events()[-1] == "approval.denied"


def test_the_asking_agent_may_not_decide_and_other_tenants_see_nothing(desk: Desk) -> None:
    approval_id = body(desk.ask())["id"]
    with pytest.raises(Forbidden) as refused:
        desk.decide(approval_id, by=Principal(TENANT, ALICE.agent_id, "reviewer", 0))
    assert refused.value.code == "own_approval"
    for call in (lambda: desk.decide(approval_id, by=OTHER_TENANT),
                 lambda: desk.read(approval_id, by=OTHER_TENANT)):  # fmt: skip
        with pytest.raises(NotFound) as missing:
            call()
        assert missing.value.code == "approval_not_found"


def test_an_approval_past_its_expiry_refuses_decisions_and_the_sweeper_marks_it(
    desk: Desk,
) -> None:
    approval_id = body(desk.ask(expires_in=timedelta(minutes=5)))["id"]
    desk.clock.advance(300)
    assert desk.read(approval_id)["status"] == "expired"  # before any sweep
    with pytest.raises(Conflict) as refused:
        desk.decide(approval_id)
    assert refused.value.code == "approval_expired"
    swept = expire_due_approvals(desk.uow(), desk.clock, desk.ids, audit_key=None)
    assert [a.id for a in swept] == [approval_id]
    assert expire_due_approvals(desk.uow(), desk.clock, desk.ids, audit_key=None) == []
    assert desk.actions()[-1] == "approval.expire"
    assert desk.events()[-1] == "approval.expired"
    assert verify_chain(desk.audit()).ok


def test_lists_show_statuses_as_seen_now_oldest_first_by_pages(desk: Desk) -> None:
    ids = [body(desk.ask(step=n, expires_in=timedelta(minutes=n + 1)))["id"] for n in range(4)]
    desk.decide(ids[3], "deny")
    desk.clock.advance(60)  # ids[0] expires now, unswept
    now = desk.clock.now()

    def listed(statuses: Any, cursor: str | None = None, limit: int = 10) -> dict[str, Any]:
        return list_approvals(desk.uow(), REVIEWER, statuses=statuses, cursor=cursor,
                              limit=limit, now=now)  # fmt: skip

    from slotward.engine.approvals import ApprovalStatus as S

    pending = listed([S.PENDING])
    assert [a["id"] for a in pending["items"]] == ids[1:3]
    assert [a["id"] for a in listed([S.EXPIRED])["items"]] == ids[:1]
    page = listed(None, limit=3)
    assert [a["id"] for a in page["items"]] == ids[:3]
    assert page["next_cursor"] == ids[2]
    assert [a["id"] for a in listed(None, page["next_cursor"])["items"]] == ids[3:]


# -- the commit gate -----------------------------------------------------------------


def test_a_commit_a_rule_matches_waits_for_one_approval_however_often_retried(
    desk: Desk,
) -> None:
    desk.require(attendees_more_than=1)
    hold = placed(desk, attendees=("bob@example.com", "carol@example.com"))
    first = desk.commit(ALICE, hold["id"], hold["token"])
    gate = body(first)
    assert first.accepted
    assert not first.created
    assert gate["outcome"] == "approval_required"
    assert gate["approval"]["status"] == "pending"
    assert gate["approval"]["hold_id"] == hold["id"]
    assert gate["approval"]["evidence"]["rules"] == ["2 attendees (more than 1)"]
    assert gate["hold"]["expires_at"] == gate["approval"]["expires_at"]
    again = desk.commit(ALICE, hold["id"], hold["token"])
    assert again.accepted
    assert body(again)["approval"]["id"] == gate["approval"]["id"]
    assert again.key == first.key
    assert len(desk.state.approvals) == 1
    assert not any(r.tool == "commit_calendar_hold" for r in desk.state.ledger.values())
    desk.decide(gate["approval"]["id"], note="go")
    done = desk.commit(ALICE, hold["id"], hold["token"])
    assert not done.accepted
    assert body(done)["status"] == "committed"
    assert desk.commit(ALICE, hold["id"], hold["token"]).replayed  # recorded once committed


def test_a_denied_commit_is_refused_and_the_hold_gets_its_own_expiry_back(desk: Desk) -> None:
    desk.require(priority_at_least=50)
    hold = placed(desk)
    approval_id = body(desk.commit(ALICE, hold["id"], hold["token"]))["approval"]["id"]
    desk.clock.advance(60)
    desk.decide(approval_id, "deny", note="not this week")
    assert desk.hold(hold["id"]).expires_at == T0 + timedelta(seconds=TTL)
    with pytest.raises(Conflict) as refused:
        desk.commit(ALICE, hold["id"], hold["token"])
    assert refused.value.code == "approval_denied"
    assert "not this week" in refused.value.detail
    desk.clock.advance(TTL)  # lapsed since: still the person's no, not a free commit
    with pytest.raises(Conflict) as again:
        desk.commit(ALICE, hold["id"], hold["token"])
    assert again.value.code == "approval_denied"


def test_an_approval_decided_late_gives_the_hold_a_ttl_to_commit_in(desk: Desk) -> None:
    desk.require(priority_at_least=1)
    hold = placed(desk)
    approval_id = body(desk.commit(ALICE, hold["id"], hold["token"]))["approval"]["id"]
    desk.clock.advance(3600)  # far past the hold's own 300 s
    desk.decide(approval_id)
    expected = desk.clock.now() + timedelta(seconds=desk.policy.default_ttl_seconds)
    assert desk.hold(hold["id"]).expires_at == expected
    assert body(desk.commit(ALICE, hold["id"], hold["token"]))["status"] == "committed"


def test_an_expired_approval_refuses_the_commit(desk: Desk) -> None:
    desk.require(priority_at_least=1)
    hold = placed(desk)
    desk.commit(ALICE, hold["id"], hold["token"])
    desk.clock.advance(24 * 3600)
    with pytest.raises(Conflict) as refused:
        desk.commit(ALICE, hold["id"], hold["token"])
    assert refused.value.code == "approval_expired"


def test_an_approval_asked_for_governs_even_after_the_policy_changes(desk: Desk) -> None:
    hold = placed(desk)  # no policy: the agent asks on its own
    approval = body(desk.ask(action={"type": "hold.commit", "hold_id": hold["id"]}))
    assert desk.commit(ALICE, hold["id"], hold["token"]).accepted
    desk.require()  # no rules: still the approval's say
    desk.decide(approval["id"], "deny")
    with pytest.raises(Conflict) as refused:
        desk.commit(ALICE, hold["id"], hold["token"])
    assert refused.value.code == "approval_denied"


def test_the_other_checks_come_before_any_approval(desk: Desk) -> None:
    desk.require(priority_at_least=1)
    hold = placed(desk)
    with pytest.raises(Conflict) as refused:
        desk.commit(ALICE, hold["id"], hold["token"] + 1)
    assert refused.value.code == "token_mismatch"
    with pytest.raises(Forbidden):
        desk.commit(BOB, hold["id"], hold["token"])
    desk.clock.advance(TTL)  # lapsed before its commit: placed again, not approved
    with pytest.raises(Conflict) as lapsed:
        desk.commit(ALICE, hold["id"], hold["token"])
    assert lapsed.value.code == "hold_expired"
    assert desk.state.approvals == {}


def test_rules_outside_the_domains_read_the_directory(desk: Desk) -> None:
    desk.require(outside_domains=["example.com"])
    inside = placed(desk)  # bob@example.com
    assert body(desk.commit(ALICE, inside["id"], inside["token"]))["status"] == "committed"
    outside = placed(desk, attendees=("eve@elsewhere.org",), start="2030-10-01T12:00:00Z")
    assert desk.commit(ALICE, outside["id"], outside["token"]).accepted


def test_the_policy_reads_back_as_set_and_every_transition_is_chained(desk: Desk) -> None:
    assert get_policy(desk.uow(), REVIEWER) == {
        "require_approval": {}, "updated_at": None, "updated_by": None,
    }  # fmt: skip
    desk.require(attendees_more_than=0, outside_domains=["Example.com"])
    assert get_policy(desk.uow(), REVIEWER)["require_approval"] == {
        "attendees_more_than": 0, "outside_domains": ["example.com"],
    }  # fmt: skip
    hold = placed(desk)
    approval_id = body(desk.commit(ALICE, hold["id"], hold["token"]))["approval"]["id"]
    desk.decide(approval_id)
    desk.commit(ALICE, hold["id"], hold["token"])
    assert desk.actions() == [
        "approval_policy.put", "hold.create", "approval.request", "approval.approve",
        "hold.commit",
    ]  # fmt: skip
    assert verify_chain(desk.audit()).ok
