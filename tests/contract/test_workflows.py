"""Workflows: the retry-storm watch's totals per workflow and its replays by the second."""

from __future__ import annotations

from datetime import datetime, timedelta

from slotward.engine.model import WorkflowStats
from slotward.engine.ports import UnitOfWork
from tests.contract.conftest import Db
from tests.contract.values import NOW, at


def _get(db: Db, workflow: str = "wf", tenant: str = "acme") -> WorkflowStats | None:
    return db.look(lambda uow: uow.workflows.get(tenant, workflow))


def second(n: int) -> datetime:
    return NOW + timedelta(seconds=n)


def test_replays_add_up_and_keep_the_latest_instant(db: Db) -> None:
    assert _get(db) is None

    def add(uow: UnitOfWork) -> WorkflowStats | None:
        uow.workflows.add_replays("acme", {"wf": (2, at(2))})
        return uow.workflows.get("acme", "wf")

    assert db.commit(add) == WorkflowStats("acme", "wf", 2, at(2), None, 0)
    added = db.commit(lambda uow: uow.workflows.add_replays("acme", {"wf": (3, at(1))}))  # late
    assert added == {"wf": WorkflowStats("acme", "wf", 5, at(2), None, 0)}  # the rows after
    assert _get(db) == added["wf"]
    assert _get(db, workflow="other") is None
    assert _get(db, tenant="other") is None


def test_storms_count_and_keep_the_last_flag(db: Db) -> None:
    db.commit(lambda uow: uow.workflows.mark_storm("acme", "wf", at(1)))
    assert _get(db) == WorkflowStats("acme", "wf", 0, None, at(1), 1)
    added = db.commit(lambda uow: uow.workflows.add_replays("acme", {"wf": (4, at(2))}))
    assert added == {"wf": WorkflowStats("acme", "wf", 4, at(2), at(1), 1)}  # the flag kept
    db.commit(lambda uow: uow.workflows.mark_storm("acme", "wf", at(3)))
    assert _get(db) == WorkflowStats("acme", "wf", 4, at(2), at(3), 2)


def test_replays_by_the_second_sum_from_the_first_second_asked_for(db: Db) -> None:
    db.commit(
        lambda uow: uow.workflows.add_replay_seconds("acme", {"wf": {second(0): 1, second(1): 2}})
    )
    db.commit(
        lambda uow: uow.workflows.add_replay_seconds("acme", {"wf": {second(1): 3, second(2): 4}})
    )
    db.commit(lambda uow: uow.workflows.add_replay_seconds("acme", {"other": {second(1): 50}}))
    db.commit(lambda uow: uow.workflows.add_replay_seconds("zeta", {"wf": {second(1): 70}}))
    db.commit(lambda uow: uow.workflows.add_replay_seconds("acme", {"wf": {}}))

    def since(n: int, tenant: str = "acme", workflow: str = "wf") -> int:
        return db.look(lambda uow: uow.workflows.replays_since(tenant, workflow, second(n)))

    assert [since(0), since(1), since(2), since(3)] == [10, 9, 4, 0]
    assert [since(0, workflow="other"), since(0, tenant="zeta"), since(0, "nobody")] == [50, 70, 0]


def test_old_seconds_are_forgotten_per_tenant_before_the_one_given(db: Db) -> None:
    db.commit(
        lambda uow: uow.workflows.add_replay_seconds("acme", {"wf": {second(0): 1, second(1): 2}})
    )
    db.commit(lambda uow: uow.workflows.add_replay_seconds("zeta", {"wf": {second(0): 5}}))

    def old(n: int) -> str | None:
        return db.look(lambda uow: uow.workflows.tenant_with_replays_before(second(n)))

    assert old(0) is None  # nothing strictly before second 0
    assert old(1) in {"acme", "zeta"}
    db.commit(lambda uow: uow.workflows.forget_replays_before("acme", second(1)))
    assert db.look(lambda uow: uow.workflows.replays_since("acme", "wf", second(0))) == 2
    assert old(1) == "zeta"
    assert old(2) in {"acme", "zeta"}
    db.commit(lambda uow: uow.workflows.forget_replays_before("zeta", second(9)))
    assert db.look(lambda uow: uow.workflows.replays_since("zeta", "wf", second(0))) == 0
    assert old(2) == "acme"


def test_many_workflows_are_added_at_once_and_read_back(db: Db) -> None:
    counts = {f"wf-{i:04}": (i % 7 + 1, at(i % 3)) for i in range(1200)}  # past a chunk
    db.commit(lambda uow: uow.workflows.add_replays("acme", {"wf-0001": (10, at(5))}))
    added = db.commit(lambda uow: uow.workflows.add_replays("acme", counts))
    assert set(added) == set(counts)
    assert added["wf-0001"] == WorkflowStats("acme", "wf-0001", 12, at(5), None, 0)
    assert added["wf-1199"] == WorkflowStats("acme", "wf-1199", 1199 % 7 + 1, at(2), None, 0)
    assert db.commit(lambda uow: uow.workflows.add_replays("acme", {})) == {}
    seconds = {"wf-a": {second(0): 1}, "wf-b": {second(0): 2, second(1): 3}, "wf-c": {}}
    db.commit(lambda uow: uow.workflows.add_replay_seconds("acme", seconds))

    def since(uow: UnitOfWork) -> list[int]:
        return [uow.workflows.replays_since("acme", w, second(0)) for w in ("wf-a", "wf-b", "wf-c")]

    assert db.look(since) == [1, 5, 0]


def test_the_watch_written_and_not_committed_is_gone(db: Db) -> None:
    def watch(uow: UnitOfWork) -> None:
        uow.workflows.add_replays("acme", {"wf": (2, at(2))})
        uow.workflows.mark_storm("acme", "wf", at(2))
        uow.workflows.add_replay_seconds("acme", {"wf": {second(0): 1}})

    db.look(watch)
    assert _get(db) is None
    assert db.look(lambda uow: uow.workflows.replays_since("acme", "wf", second(0))) == 0


def test_the_busiest_workflows_come_most_replays_first_then_by_id(db: Db) -> None:
    def fill(uow: UnitOfWork) -> None:
        counts = {"wf-c": 5, "wf-a": 2, "wf-b": 5, "wf-d": 9}
        uow.workflows.add_replays("acme", {w: (n, at(1)) for w, n in counts.items()})
        uow.workflows.mark_storm("acme", "wf-e", at(2))  # a storm flagged, no replay counted
        uow.workflows.add_replays("zeta", {"wf-z": (100, at(1))})

    db.commit(fill)

    def busiest(limit: int, tenant: str = "acme") -> list[tuple[str, int]]:
        found = db.look(lambda uow: uow.workflows.busiest(tenant, limit))
        return [(w.workflow_id, w.replays) for w in found]

    assert busiest(10) == [("wf-d", 9), ("wf-b", 5), ("wf-c", 5), ("wf-a", 2), ("wf-e", 0)]
    assert busiest(3) == [("wf-d", 9), ("wf-b", 5), ("wf-c", 5)]
    assert busiest(10, tenant="zeta") == [("wf-z", 100)]
    assert busiest(10, tenant="nobody") == []
    [top] = db.look(lambda uow: uow.workflows.busiest("acme", 1))
    assert top == WorkflowStats("acme", "wf-d", 9, at(1), None, 0)  # every field, read back


def test_only_the_workflows_a_storm_is_possible_for_or_flagged_are_read_back(db: Db) -> None:
    db.commit(lambda uow: uow.workflows.add_replays("acme", {"near": (8, at(1))}))
    db.commit(lambda uow: uow.workflows.mark_storm("acme", "flagged", at(1)))
    counts = {"near": (2, at(2)), "far": (3, at(2)), "flagged": (1, at(2))}
    added = db.commit(lambda uow: uow.workflows.add_replays("acme", counts, read_back=10))
    assert added == {
        "near": WorkflowStats("acme", "near", 10, at(2), None, 0),  # reaches it
        "flagged": WorkflowStats("acme", "flagged", 1, at(2), at(1), 1),  # carries a flag
    }
    # Added all the same: "far" is counted, only not read back.
    assert _get(db, workflow="far") == WorkflowStats("acme", "far", 3, at(2), None, 0)
