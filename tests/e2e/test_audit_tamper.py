"""A database writer without the audit key, against the keyed chain, on SQLite and PostgreSQL.

The server runs with ``SLOTWARD_AUDIT_KEY`` set; the attacker has the
database (``Server.sql``, as any writer of it would) and slotward's source,
but not the key. Both rewrites of issue 12 are tried: every hash and the head
recomputed (plain SHA-256, the only hash they can make), and the tail deleted
with the head moved back. ``/v1/audit/verify`` must answer ``ok: false`` to
the first, and to the second given a checkpoint signed before it.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote

import pytest

from slotward.engine.errors import Conflict
from slotward.engine.model import AuditEntry
from slotward.engine.rules.audit import AuditKey, entry_hash, is_keyed
from slotward.engine.rules.checkpoints import Checkpoint, sign_checkpoint
from slotward.engine.usecases.audit import take_checkpoint
from tests.e2e.conftest import HOLD_BODY, Client, Server

AUDIT_KEY = "e2e audit key: 32 bytes at least"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_COLUMNS = "tenant, seq, at_us, actor, action, key, hold_id, outcome, prev_hash, hash"


@pytest.fixture
def config_overrides() -> dict[str, Any]:
    return {"audit_key": AUDIT_KEY}


def _hold(workflow: str, **extra: Any) -> dict[str, Any]:
    return {**HOLD_BODY, "workflow_id": workflow, **extra}


async def _activity(server: Server) -> Client:
    """Every kind of audited change: create, conflict, commit, release, expiry, execution."""
    agent = await server.key()
    held = (await agent.create(_hold("wf-1"))).json
    assert (await agent.create(_hold("wf-2"))).status == 409
    assert (await agent.commit(held["id"], held["token"])).status == 200
    later = {"start": "2030-10-15T14:00:00Z"}
    released = (await agent.create(_hold("wf-3", **later))).json
    assert (await agent.release(released["id"])).status == 200
    soon = {"start": "2030-10-16T14:00:00Z", "hold_ttl_seconds": 60}
    assert (await agent.create(_hold("wf-4", **soon))).status == 201
    server.clock.advance(61)
    assert await server.sweep() == 1
    call = {"workflow_id": "wf-5", "step": 1, "tool": "send_email", "arguments": {"to": "a"}}
    acquired = await agent.post("/v1/executions", call)
    assert acquired.status == 201, acquired.body
    done = {"lease_token": acquired.json["lease_token"], "outcome": "succeeded", "result": None}
    assert (await agent.post(f"/v1/executions/{acquired.key}/complete", done)).status == 200
    return agent


def _chain(server: Server, tenant: str = "acme") -> list[AuditEntry]:
    rows = server.sql(f"SELECT {_COLUMNS} FROM audit_log WHERE tenant = ? ORDER BY seq", tenant)
    return [AuditEntry(r[0], r[1], _EPOCH + timedelta(microseconds=r[2]), *r[3:]) for r in rows]


def _store(server: Server, chain: list[AuditEntry]) -> None:
    """The attacker writes the rows and the head back."""
    for e in chain:
        server.sql(
            "UPDATE audit_log SET actor = ?, outcome = ?, prev_hash = ?, hash = ? "
            "WHERE tenant = ? AND seq = ?",
            e.actor, e.outcome, e.prev_hash, e.hash, e.tenant, e.seq,
        )  # fmt: skip
    last = chain[-1]
    server.sql("UPDATE audit_heads SET seq = ?, hash = ? WHERE tenant = ?",
               last.seq, last.hash, last.tenant)  # fmt: skip


def _recompute_plain(chain: list[AuditEntry], edit_seq: int, keep: int = 0) -> list[AuditEntry]:
    """Edit one entry and recompute every hash after the first ``keep`` with SHA-256.

    What issue 12 did: slotward's own hash function, without a key (the
    attacker has none), and every later link relinked.
    """
    out = chain[:keep]
    for e in chain[keep:]:
        draft = replace(e, actor="mallory" if e.seq == edit_seq else e.actor,
                        prev_hash=out[-1].hash if out else "0" * 64)  # fmt: skip
        out.append(replace(draft, hash=entry_hash(draft)))
    return out


async def _checkpoint(server: Server, tenant: str = "acme") -> str:
    key = server.services.policy.audit_key
    assert key is not None
    return await server.services.store.write(
        lambda uow: take_checkpoint(uow, tenant, key, server.clock)
    )


async def test_every_audited_change_is_keyed_and_verifies(server: Server) -> None:
    agent = await _activity(server)
    chain = _chain(server)
    assert [e.action for e in chain] == [
        "hold.create", "hold.create", "hold.commit", "hold.create", "hold.release",
        "hold.create", "hold.expire", "execution.acquire", "execution.complete",
    ]  # fmt: skip
    assert all(is_keyed(e.hash) for e in chain)
    listed = (await agent.get("/v1/audit")).json["items"]
    assert listed[-1]["hash"] == chain[-1].hash
    verify = await agent.get("/v1/audit/verify")
    assert verify.status == 200
    assert verify.json == {
        "ok": True, "count": 9, "head": chain[-1].hash, "keyed": True, "keyed_from": 1,
    }  # fmt: skip


async def test_recomputing_every_hash_and_the_head_with_sha256_is_caught(server: Server) -> None:
    agent = await _activity(server)
    forged = _recompute_plain(_chain(server), edit_seq=3)
    _store(server, forged)
    assert _chain(server) == forged  # the rewrite is in the database
    verify = (await agent.get("/v1/audit/verify")).json
    assert verify["ok"] is False
    assert verify["reason"] == "unkeyed"  # a plain chain to its end, under a keyed server


async def test_the_servers_next_writes_do_not_launder_a_sha256_rewrite(server: Server) -> None:
    """After the rewrite the keyed server carries on: its writes must not key the forgery."""
    agent = await _activity(server)
    _store(server, _recompute_plain(_chain(server), edit_seq=3))
    assert (await agent.create(_hold("wf-after", start="2030-10-20T14:00:00Z"))).status == 201
    assert (await agent.create(_hold("wf-later", start="2030-10-21T14:00:00Z"))).status == 201
    assert not any(is_keyed(e.hash) for e in _chain(server))  # extended in plain, not keyed
    verify = (await agent.get("/v1/audit/verify")).json
    assert (verify["ok"], verify["reason"], verify["keyed_from"]) == (False, "unkeyed", None)
    with pytest.raises(Conflict) as refused:  # nor is the forgery signed
        await _checkpoint(server)
    assert refused.value.extra["reason"] == "unkeyed"


async def test_recomputing_from_the_edited_entry_on_is_caught_there(server: Server) -> None:
    agent = await _activity(server)
    _store(server, _recompute_plain(_chain(server), edit_seq=5, keep=4))
    verify = (await agent.get("/v1/audit/verify")).json
    assert (verify["ok"], verify["broken_at"], verify["reason"]) == (False, 5, "unkeyed")
    assert verify["count"] == 4


async def test_a_deleted_tail_with_the_head_moved_back_fails_the_checkpoint(
    server: Server,
) -> None:
    agent = await _activity(server)
    kept = await _checkpoint(server)
    chain = _chain(server)
    server.sql("DELETE FROM audit_log WHERE tenant = ? AND seq > ?", "acme", 6)
    server.sql("UPDATE audit_heads SET seq = ?, hash = ? WHERE tenant = ?", 6, chain[5].hash,
               "acme")  # fmt: skip
    alone = (await agent.get("/v1/audit/verify")).json
    assert alone["ok"] is True  # without a checkpoint the shorter chain is a whole one
    checked = await agent.get(f"/v1/audit/verify?checkpoint={quote(kept)}")
    assert checked.status == 200
    assert checked.json["ok"] is False
    assert (checked.json["checkpoint"], checked.json["reason"]) == ("failed", "checkpoint")
    assert (checked.json["broken_at"], checked.json["count"]) == (7, 6)


async def test_a_kept_checkpoint_holds_while_the_chain_grows(server: Server) -> None:
    agent = await _activity(server)
    kept = await _checkpoint(server)
    assert (await agent.create(_hold("wf-9", start="2030-10-17T14:00:00Z"))).status == 201
    checked = (await agent.get(f"/v1/audit/verify?checkpoint={quote(kept)}")).json
    assert (checked["ok"], checked["checkpoint"], checked["count"]) == (True, "ok", 10)


async def test_the_whole_chain_deleted_fails_the_checkpoint(server: Server) -> None:
    agent = await _activity(server)
    kept = await _checkpoint(server)
    server.sql("DELETE FROM audit_log")
    server.sql("DELETE FROM audit_heads")
    checked = (await agent.get(f"/v1/audit/verify?checkpoint={quote(kept)}")).json
    assert (checked["ok"], checked["count"], checked["checkpoint"]) == (False, 0, "failed")


async def test_bad_checkpoints_are_422s_with_stable_codes(server: Server) -> None:
    agent = await _activity(server)
    other = await server.key(tenant="globex", agent="g")
    assert (await other.create(_hold("wf-g"))).status == 201
    theirs = await _checkpoint(server, "globex")
    head = _chain(server)[-1]
    forged = sign_checkpoint(
        Checkpoint("acme", head.seq, head.hash, "2030-10-01T09:00:00Z"),
        AuditKey.derive(b"not the server's key at all"),
    )
    cases = {
        theirs: "checkpoint_wrong_tenant",
        forged: "checkpoint_signature_invalid",
        "not-a-checkpoint": "invalid_checkpoint",
        "swcp1.%%%.AAAA": "invalid_checkpoint",
    }
    for token, code in cases.items():
        answer = await agent.get(f"/v1/audit/verify?checkpoint={quote(token)}")
        assert answer.status == 422, (token, answer.body)
        assert answer.headers["Content-Type"].startswith("application/problem+json")
        assert answer.json["code"] == code
        assert AUDIT_KEY not in answer.body.decode()
    assert (await agent.get("/v1/audit/verify?checkpoints=x")).json["code"] == "unknown_field"
