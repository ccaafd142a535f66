"""Use cases of a tenant's approval policy: which commits wait for a person."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from slotward.engine.approvals import ApprovalRules
from slotward.engine.model import Principal
from slotward.engine.ports import Clock, UnitOfWork
from slotward.engine.rules.approvals import parse_rules, rules_document
from slotward.engine.rules.policy import Policy
from slotward.engine.rules.timenorm import format_instant
from slotward.engine.usecases.effects import audit

__all__ = ["get_policy", "put_policy"]


def _document(rules: ApprovalRules, at: datetime | None, by: str | None) -> dict[str, Any]:
    return {
        "require_approval": rules_document(rules),
        "updated_at": None if at is None else format_instant(at),
        "updated_by": by,
    }


def put_policy(
    uow: UnitOfWork,
    principal: Principal,
    require: Mapping[str, Any],
    policy: Policy,
    clock: Clock,
) -> dict[str, Any]:
    """Replace the tenant's policy (an empty ``require`` needs no approval at all)."""
    rules = parse_rules(require)
    with uow:
        uow.lock_tenant(principal.tenant)
        now = clock.now()
        uow.approvals.put_rules(principal.tenant, rules, now, principal.agent_id)
        audit(uow, principal.tenant, principal.agent_id, now, "approval_policy.put", None, None,
              "updated", audit_key=policy.audit_key)  # fmt: skip
        uow.commit()
    return _document(rules, now, principal.agent_id)


def get_policy(uow: UnitOfWork, principal: Principal) -> dict[str, Any]:
    """The tenant's policy; one never set requires no approval."""
    with uow:
        found = uow.approvals.rules(principal.tenant)
    if found is None:
        return _document(ApprovalRules(), None, None)
    return _document(*found)
