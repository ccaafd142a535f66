"""Contested slots over real HTTP: conflicts, alternatives, preemption, expiry."""

from __future__ import annotations

from typing import Any

from slotward.engine.rules.fingerprint import child_key
from tests.e2e.conftest import Server

SLOT = {"attendees": ["alex@example.com"], "start": "2030-10-14T14:00:00Z", "duration_minutes": 30}


def _body(workflow: str, **extra: Any) -> dict[str, Any]:
    return {"workflow_id": workflow, **SLOT, **extra}


async def test_equal_priority_conflict_lists_holder_and_alternatives_that_work(
    server: Server,
) -> None:
    a = await server.key(agent="agent-a")
    b = await server.key(agent="agent-b")
    won = await a.create(_body("wf-a", title="Sync"))
    overlapping = {**_body("wf-b", title="Other"), "start": "2030-10-14T14:15:00Z"}
    lost = await b.create(overlapping)
    assert lost.status == 409
    problem = lost.json
    assert problem["code"] == "slot_conflict"
    assert problem["retryable"] is True
    assert int(lost.headers["Retry-After"]) == 300  # the holder's TTL, clock frozen
    assert lost.key is not None
    assert lost.headers["Idempotent-Replayed"] == "false"
    [conflict] = problem["conflicts"]
    assert conflict["kind"] == "held"
    assert conflict["agent"] == "agent-a"
    assert conflict["priority"] == 50
    assert conflict["expires_at"] == won.json["expires_at"]
    assert conflict["audit_seq"] == won.json["audit_seq"]
    assert conflict["same_intent"] is False
    alternatives = problem["alternatives"]
    assert 1 <= len(alternatives) <= 3
    for alt in alternatives:
        taken = await b.create(
            {"workflow_id": "wf-b", "attendees": SLOT["attendees"], **alt, "title": "Other"}
        )
        assert taken.status == 201, taken.json
    assert server.overlapping_pairs() == 0
    # Nothing of the refused claim was stored: a retry executes again.
    again = await b.create(overlapping)
    assert again.status == 409
    assert not again.replayed


async def test_same_intent_from_another_workflow_is_flagged(server: Server) -> None:
    a = await server.key(agent="agent-a")
    b = await server.key(agent="agent-b", priority=90)
    await a.create(_body("wf-a"))
    twin = await b.create(_body("wf-b"))
    assert twin.status == 409  # never preempted, whatever the priority
    assert twin.json["conflicts"][0]["same_intent"] is True


async def test_higher_priority_preempts_a_held_hold_and_the_loser_cannot_commit(
    server: Server,
) -> None:
    low = await server.key(agent="low", priority=20)
    high = await server.key(agent="high", priority=80)
    first = await low.create(_body("wf-low"))
    winner = await high.create(
        {"workflow_id": "wf-high", "attendees": ["alex@example.com"],
         "start": "2030-10-14T14:15:00Z", "duration_minutes": 30}
    )  # fmt: skip
    assert winner.status == 201
    loser = await low.get(f"/v1/holds/{first.json['id']}")
    assert loser.json["status"] == "preempted"
    assert loser.json["preempted_by"] == winner.json["id"]
    commit = await low.commit(first.json["id"], first.json["token"])
    assert commit.status == 409
    assert commit.json["code"] == "hold_preempted"
    events = server.sql("SELECT type FROM outbox WHERE hold_id = ?", first.json["id"])
    assert ("hold.preempted",) in events
    assert server.overlapping_pairs() == 0


async def test_equal_or_lower_priority_never_preempts(server: Server) -> None:
    a = await server.key(agent="a", priority=50)
    b = await server.key(agent="b", priority=50)
    await a.create(_body("wf-a"))
    # A body priority may lower the key's priority, never raise it.
    assert (await b.create(_body("wf-b", priority=40))).status == 409
    assert (await b.create(_body("wf-b"))).status == 409


async def test_a_committed_hold_is_never_preempted(server: Server) -> None:
    low = await server.key(agent="low", priority=10)
    high = await server.key(agent="high", priority=100)
    held = await low.create(_body("wf-low"))
    assert (await low.commit(held.json["id"], held.json["token"])).status == 200
    claim = await high.create(_body("wf-high"))
    assert claim.status == 409
    assert claim.json["conflicts"][0]["kind"] == "committed"
    assert claim.json["retryable"] is False
    assert "Retry-After" not in claim.headers


async def test_commit_and_release_replay_and_stale_tokens_are_refused(server: Server) -> None:
    agent = await server.key()
    hold = (await agent.create(_body("wf"))).json
    stale = await agent.commit(hold["id"], hold["token"] + 1)
    assert stale.status == 409
    assert stale.json["code"] == "token_mismatch"
    assert stale.json["retryable"] is False
    commit = await agent.commit(hold["id"], hold["token"])
    assert commit.status == 200
    assert commit.json["status"] == "committed"
    assert commit.json["token"] == hold["token"] + 1
    again = await agent.commit(hold["id"], hold["token"])
    assert again.status == 200
    assert again.replayed
    assert again.body == commit.body
    assert again.key == commit.key != hold["key"]
    release = await agent.release(hold["id"])
    assert release.json["status"] == "released"
    twice = await agent.release(hold["id"])
    assert twice.replayed
    assert twice.body == release.body
    late_commit = await agent.commit(hold["id"], commit.json["token"])
    assert late_commit.status == 200
    assert late_commit.replayed


async def test_back_to_back_slots_do_not_conflict(server: Server) -> None:
    agent = await server.key()
    first = await agent.create(_body("wf-1"))
    second = await agent.create(
        {"workflow_id": "wf-2", "attendees": ["alex@example.com"],
         "start": "2030-10-14T14:30:00Z", "end": "2030-10-14T15:00:00Z"}
    )  # fmt: skip
    before = await agent.create(
        {"workflow_id": "wf-3", "attendees": ["alex@example.com"],
         "start": "2030-10-14T13:30:00Z", "end": "2030-10-14T14:00:00Z"}
    )  # fmt: skip
    assert (first.status, second.status, before.status) == (201, 201, 201)


async def test_expired_hold_does_not_block_and_its_late_commit_works_while_free(
    server: Server,
) -> None:
    a = await server.key(agent="a")
    b = await server.key(agent="b")
    first = (await a.create(_body("wf-a", hold_ttl_seconds=60))).json
    server.clock.advance(61)
    read = await a.get(f"/v1/holds/{first['id']}")
    assert read.json["status"] == "expired"  # swept or not
    late = await a.commit(first["id"], first["token"])
    assert late.status == 200
    assert late.json["status"] == "committed"

    other = (await a.create(_body("wf-x", attendees=["sam@example.com"], hold_ttl_seconds=60))).json
    server.clock.advance(61)
    assert await server.sweep() == 1
    assert await server.sweep() == 0  # swept once, not again
    swept = await a.get(f"/v1/holds/{other['id']}")
    assert swept.json["status"] == "expired"
    assert swept.json["token"] == other["token"]  # held -> expired keeps the token
    taken = await b.create(_body("wf-b", attendees=["sam@example.com"]))
    assert taken.status == 201  # the expired hold does not block
    too_late = await a.commit(other["id"], other["token"])
    assert too_late.status == 409
    assert too_late.json["code"] == "hold_expired"
    events = server.sql("SELECT type FROM outbox WHERE hold_id = ?", other["id"])
    assert events.count(("hold.expired",)) == 1
    assert server.overlapping_pairs() == 0


async def test_release_of_an_expired_hold_makes_it_final(server: Server) -> None:
    agent = await server.key()
    for headers in ({}, {"Idempotency-Key": "release-by-client-key"}):
        hold = (await agent.create(_body(f"wf-{len(headers)}", hold_ttl_seconds=10))).json
        server.clock.advance(11)
        answer = await agent.release(hold["id"], headers=headers)
        assert answer.status == 200
        assert answer.json["status"] == "released"
        # The owner gave it up: a late commit cannot bring it back, whatever the key.
        late = await agent.commit(hold["id"], hold["token"] + 5)
        assert late.status == 409
        assert late.json["code"] == "hold_released"  # status is checked before the token


async def test_every_change_is_in_the_audit_chain_and_it_verifies(server: Server) -> None:
    a = await server.key(agent="a")
    hold = (await a.create(_body("wf"))).json
    await a.commit(hold["id"], hold["token"])
    await a.create(_body("wf-2"))  # a conflict with the committed hold
    audit = (await a.get("/v1/audit")).json["items"]
    assert [(e["action"], e["outcome"]) for e in audit] == [
        ("hold.create", "fresh"),
        ("hold.commit", "fresh"),
        ("hold.create", "conflict"),
    ]
    verify = (await a.get("/v1/audit/verify")).json
    assert verify == {"ok": True, "count": 3, "head": audit[-1]["hash"]}
    # The chain is tamper-evident: change one row and verify fails.
    server.sql("UPDATE audit_log SET actor = 'mallory' WHERE seq = 2")
    broken = (await a.get("/v1/audit/verify")).json
    assert broken["ok"] is False
    assert broken["broken_at"] == 2


async def test_client_keys_cannot_squat_on_derived_keys(server: Server) -> None:
    a = await server.key(agent="a")
    b = await server.key(agent="b")
    hold = (await a.create(_body("wf-a"))).json
    squat = {"Idempotency-Key": child_key(hold["key"], "commit")}
    before = server.table_counts()
    other = await b.create(_body("wf-b", attendees=["sam@example.com"]), headers=squat)
    assert other.status == 422  # a key of the derived form names one call: not this one
    assert other.json["code"] == "invalid_idempotency_key"
    assert server.table_counts() == before
    commit = await a.commit(hold["id"], hold["token"])
    assert commit.status == 200
    assert commit.json["status"] == "committed"


async def test_a_second_commit_under_another_key_replays_the_first(server: Server) -> None:
    agent = await server.key()
    hold = (await agent.create(_body("wf"))).json
    first = await agent.commit(hold["id"], hold["token"], headers={"Idempotency-Key": "c-1"})
    assert first.status == 200
    again = await agent.commit(hold["id"], hold["token"])
    assert again.status == 200
    assert again.replayed
    assert again.body == first.body
    assert again.key == "c-1"
    released = await agent.release(hold["id"], headers={"Idempotency-Key": "r-1"})
    twice = await agent.release(hold["id"], headers={"Idempotency-Key": "r-2"})
    assert twice.replayed
    assert twice.body == released.body


async def test_a_deleted_audit_tail_is_detected(server: Server) -> None:
    agent = await server.key()
    await agent.create(_body("wf-1"))
    await agent.create(_body("wf-2", attendees=["sam@example.com"]))
    assert (await agent.get("/v1/audit/verify")).json["ok"] is True
    server.sql("DELETE FROM audit_log WHERE seq = 2")
    verify = (await agent.get("/v1/audit/verify")).json
    assert verify["ok"] is False
    assert verify["broken_at"] == 2
    assert verify["count"] == 1


async def test_an_unswept_expired_hold_does_not_block(server: Server) -> None:
    a = await server.key(agent="a")
    b = await server.key(agent="b")
    first = (await a.create(_body("wf-a", hold_ttl_seconds=60))).json
    server.clock.advance(61)  # no sweep: the row still says held
    assert server.sql("SELECT status FROM holds WHERE id = ?", first["id"]) == [("held",)]
    taken = await b.create(_body("wf-b"))
    assert taken.status == 201
    assert server.overlapping_pairs() == 0
    late = await a.commit(first["id"], first["token"])
    assert late.status == 409
    assert late.json["code"] == "hold_expired"
