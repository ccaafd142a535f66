"""The service layer (api/service.py): the rules that once lived in handlers.

Its import rules are checked here: no aiohttp behind it, and the entrypoints
(api/http, api/cli) reach the use cases only through it. The rules themselves
run on the in-memory fakes, with a clock stepped by hand.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from slotward.api import service
from slotward.api.bootstrap import Services, bootstrap
from slotward.api.config import Config
from slotward.engine.clock import FixedClock
from slotward.engine.errors import Forbidden, InvalidRequest, SlotwardError
from slotward.engine.fakes import InMemoryStore, SequentialIds
from slotward.engine.model import Principal, Reply
from slotward.engine.tools import COMMIT_HOLD, CREATE_HOLD, FIND_FREE_SLOTS, RELEASE_HOLD

ROOT = Path(__file__).resolve().parent.parent
T0 = datetime(2030, 10, 1, 9, 0, tzinfo=UTC)
AGENT = Principal("acme", "agent-a", "agent", 50)
REVIEWER = Principal("acme", "auditor", "reviewer", 0)
ARGS = {"attendees": ["ann@example.com"], "start": "2030-10-01T10:00:00Z", "duration": "PT30M"}


# -- import rules -----------------------------------------------------------------


def test_the_service_loads_without_aiohttp() -> None:
    """In a fresh interpreter: everything behind api/service.py, not only api/."""
    code = (
        "import sys, slotward.api.service\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'aiohttp'))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def usecase_imports(source: str) -> list[str]:
    """What ``source`` imports to reach the store without the service: an
    engine.usecases module, or the UnitOfWork a transaction of its own needs
    (the audit CLI and ``/metrics`` once ran theirs)."""
    names: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.extend(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.append(node.module)
            names.extend(f"{node.module}.{a.name}" for a in node.names)
    return [
        n
        for n in names
        if n.startswith("slotward.engine.usecases") or n == "slotward.engine.ports.UnitOfWork"
    ]


def test_the_entrypoints_reach_the_use_cases_only_through_the_service() -> None:
    entrypoints = [*(ROOT / "api" / "http").glob("*.py"), *(ROOT / "api" / "cli").glob("*.py")]
    found = {
        str(p.relative_to(ROOT)): bad
        for p in sorted(entrypoints)
        if (bad := usecase_imports(p.read_text()))
    }
    assert not found, f"import the use cases through api/service.py: {found}"


def store_calls(source: str) -> list[int]:
    """Lines of ``source`` that call a store's ``read`` or ``write`` themselves
    (``svc.store.write(...)``, ``store.read(...)``): a transaction of their own."""
    return [
        node.lineno
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in {"read", "write", "run_write_sync"}
        and getattr(node.func.value, "attr", getattr(node.func.value, "id", None)) == "store"
    ]


def test_the_entrypoints_open_no_transaction_of_their_own() -> None:
    entrypoints = [*(ROOT / "api" / "http").glob("*.py"), *(ROOT / "api" / "cli").glob("*.py")]
    found = {
        str(p.relative_to(ROOT)): lines
        for p in sorted(entrypoints)
        if (lines := store_calls(p.read_text()))
    }
    assert not found, f"reach the store through api/service.py: {found}"


def test_the_store_rule_catches_a_planted_call() -> None:
    assert store_calls("await svc.store.write(lambda uow: uow.holds.save(h))\n") == [1]
    assert store_calls("x = 1\nawait store.read(look)\n") == [2]
    assert store_calls("await service.gauges(svc, now)\nawait request.read()\n") == []


def test_the_import_rule_catches_a_planted_import() -> None:
    assert usecase_imports("from slotward.engine.usecases.reads import get_hold\n")
    assert usecase_imports("from slotward.engine import usecases\n")
    assert usecase_imports("import slotward.engine.usecases.placing\n")
    assert usecase_imports("from slotward.engine.ports import Store, UnitOfWork\n")
    assert not usecase_imports("from slotward.engine.ports import Store\n")
    assert not usecase_imports("from slotward.api import service\n")


# -- the rules, on the fakes ------------------------------------------------------


@pytest.fixture
async def svc() -> Services:
    return await bootstrap(
        Config(), store=InMemoryStore(), clock=FixedClock(T0), ids=SequentialIds()
    )


def _doc(reply: Reply | dict[str, Any]) -> dict[str, Any]:
    assert isinstance(reply, Reply)
    doc: dict[str, Any] = json.loads(reply.body)
    return doc


async def _fails(call: Any, code: str) -> SlotwardError:
    with pytest.raises(SlotwardError) as caught:
        await call
    assert caught.value.code == code, caught.value.detail
    return caught.value


async def test_an_agent_may_lower_its_priority_but_not_raise_it(svc: Services) -> None:
    raised = service.create_hold(
        svc, AGENT, {**ARGS, "priority": 51}, workflow_id="wf", step=None, client_key=None
    )
    error = await _fails(raised, "priority_too_high")
    assert error.extra == {"field": "priority"}
    lowered = await service.create_hold(
        svc, AGENT, {**ARGS, "priority": 10}, workflow_id="wf", step=None, client_key=None
    )
    assert _doc(lowered)["priority"] == 10
    kept = await service.create_hold(
        svc, AGENT, {**ARGS, "start": "2030-10-01T12:00:00Z"}, workflow_id="wf", step=None,
        client_key=None,
    )  # fmt: skip
    assert _doc(kept)["priority"] == 50


def _call(tool: str, arguments: dict[str, Any], **envelope: Any) -> dict[str, Any]:
    return {"tool": tool, "arguments": arguments, **envelope}


async def test_an_alias_and_its_field_together_are_refused(svc: Services) -> None:
    both = _call(CREATE_HOLD.name, {**ARGS, "start_time": ARGS["start"]}, workflow_id="wf")
    error = await _fails(service.call_tool(svc, AGENT, both, None), "invalid_field")
    assert error.detail == "give 'start' or 'start_time', not both"
    assert error.extra == {"field": "arguments.start_time"}


async def test_a_start_is_needed_under_either_name(svc: Services) -> None:
    args = {k: v for k, v in ARGS.items() if k != "start"}
    error = await _fails(
        service.call_tool(svc, AGENT, _call(CREATE_HOLD.name, args, workflow_id="wf"), None),
        "missing_field",
    )
    assert (error.detail, error.extra) == (
        "arguments need 'start' (or 'start_time')",
        {"field": "arguments.start"},
    )
    aliased = {**args, "start_time": ARGS["start"]}
    reply = await service.call_tool(
        svc, AGENT, _call(CREATE_HOLD.name, aliased, workflow_id="wf"), None
    )
    assert _doc(reply)["start"] == "2030-10-01T10:00:00Z"


async def test_a_hold_through_the_envelope_needs_the_workflow(svc: Services) -> None:
    error = await _fails(
        service.call_tool(svc, AGENT, _call(CREATE_HOLD.name, ARGS), None), "missing_field"
    )
    assert error.detail == "create_calendar_hold needs the envelope's 'workflow_id'"
    assert error.extra == {"field": "workflow_id"}


async def test_an_unknown_tool_is_refused_before_anything_runs(svc: Services) -> None:
    error = await _fails(
        service.call_tool(svc, AGENT, _call("book_it", ARGS), None), "invalid_field"
    )
    assert error.extra == {"field": "tool"}
    assert "'create_calendar_hold'" in error.detail


async def test_the_envelope_runs_every_tool_as_its_endpoint_does(svc: Services) -> None:
    envelope = _call(CREATE_HOLD.name, ARGS, workflow_id="wf", step=1)
    placed = await service.call_tool(svc, AGENT, envelope, None)
    direct = await service.create_hold(svc, AGENT, ARGS, workflow_id="wf", step=1, client_key=None)
    assert isinstance(placed, Reply)
    assert isinstance(direct, Reply)
    assert (placed.created, placed.replayed, direct.replayed) == (True, False, True)
    assert direct.key == placed.key  # one intent, one key, either way in
    hold = _doc(placed)
    ref = {"hold_id": hold["id"], "token": hold["token"]}
    committed = await service.call_tool(svc, AGENT, _call(COMMIT_HOLD.name, ref), None)
    assert _doc(committed)["status"] == "committed"
    again = await service.commit(svc, AGENT, hold["id"], hold["token"], None)
    assert again.replayed
    assert again.body == committed.body  # type: ignore[union-attr]
    released = await service.call_tool(
        svc, AGENT, _call(RELEASE_HOLD.name, {"hold_id": hold["id"]}), None
    )
    assert _doc(released)["status"] == "released"
    window = {"attendees": ARGS["attendees"], "from": "2030-10-01T09:00:00Z",
              "to": "2030-10-01T11:00:00Z", "duration_minutes": 60}  # fmt: skip
    found = await service.call_tool(svc, REVIEWER, _call(FIND_FREE_SLOTS.name, window), None)
    assert isinstance(found, dict)
    assert found["slots"]


async def test_only_reads_are_open_to_every_role(svc: Services) -> None:
    envelope = _call(CREATE_HOLD.name, ARGS, workflow_id="wf")
    with pytest.raises(Forbidden):
        await service.call_tool(svc, REVIEWER, envelope, None)


async def test_a_client_key_is_checked_by_the_service(svc: Services) -> None:
    bad = service.create_hold(svc, AGENT, ARGS, workflow_id="wf", step=None, client_key=" x")
    await _fails(bad, "invalid_idempotency_key")
    reply = await service.create_hold(
        svc, AGENT, ARGS, workflow_id="wf", step=None, client_key="mine-1"
    )
    assert reply.key == "mine-1"


async def test_an_execution_needs_a_workflow_or_its_own_key(svc: Services) -> None:
    fields = {"tool": "send_email", "arguments": {"to": "ann@example.com"}}
    error = await _fails(
        service.acquire_execution(svc, AGENT, fields, None, lambda: False), "missing_field"
    )
    assert error.extra == {"field": "workflow_id"}
    own = await service.acquire_execution(svc, AGENT, fields, "mail-1", lambda: False)
    assert (own.created, own.key) == (True, "mail-1")
    keyed = await service.acquire_execution(
        svc, AGENT, {**fields, "workflow_id": "wf"}, None, lambda: False
    )
    assert keyed.created
    assert keyed.key.startswith("idem_")


async def test_a_waiter_whose_caller_has_gone_stops_waiting(svc: Services) -> None:
    fields = {"tool": "send_email", "arguments": {}, "workflow_id": "wf", "wait_ms": 30000}
    await service.acquire_execution(svc, AGENT, fields, None, lambda: False)
    # Another caller's lease is live; a caller already gone is not kept waiting.
    await _fails(
        service.acquire_execution(svc, AGENT, fields, None, lambda: True), "request_in_progress"
    )


async def test_keys_are_issued_and_withdrawn_through_the_service(svc: Services) -> None:
    made = await service.issue_key(svc.store, AGENT, svc.clock, svc.ids, Config().key_hasher())
    assert await svc.keys.principal(made.secret) == AGENT
    await service.withdraw_key(svc.store, made.id, svc.clock)
    await _fails(service.withdraw_key(svc.store, made.id, svc.clock), "key_not_found")
    owner = Principal("acme", "x", "owner", 1)  # type: ignore[arg-type]
    with pytest.raises(InvalidRequest):
        await service.issue_key(svc.store, owner, svc.clock, svc.ids, Config().key_hasher())
