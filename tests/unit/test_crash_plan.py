"""The crash test's plan: one seed, one plan; every planned call placed exactly once."""

from __future__ import annotations

from tests.e2e.crash_plan import KILLS, SEED, Plan, make_plan
from tests.e2e.crash_workload import SEED_VARIABLE, crash_seed

AGENTS = [f"agent-{i}" for i in range(4)] * 2


def _indices(plan: Plan) -> list[int]:
    return sorted(i for tasks in plan.tasks for task in tasks for i in task.calls)


def test_a_seed_makes_one_plan_and_another_seed_another() -> None:
    assert make_plan(5, AGENTS) == make_plan(5, AGENTS)
    assert make_plan(5, AGENTS) != make_plan(6, AGENTS)


def test_every_plan_index_is_one_call_and_each_agent_sends_in_plan_order() -> None:
    plan = make_plan(5, AGENTS)
    assert _indices(plan) == list(range(plan.length))
    for tasks in plan.tasks:
        mine = [i for task in tasks for i in task.calls]
        assert mine == sorted(mine)


def test_the_kill_points_lie_inside_the_plan() -> None:
    plan = make_plan(5, AGENTS)
    assert len(plan.kill_at) == KILLS
    assert list(plan.kill_at) == sorted(set(plan.kill_at))
    assert plan.kill_at[-1] < plan.length - len(AGENTS)


def test_the_plan_has_every_kind_of_task_and_every_outcome() -> None:
    tasks = [t for agent in make_plan(5, AGENTS).tasks for t in agent]
    assert {t.kind for t in tasks} == {"create", "commit", "release", "execution"}
    assert {t.outcome for t in tasks} == {None, "succeeded", "failed_terminal", "failed_retryable"}
    assert any(t.kind == "create" and len(t.calls) == 2 for t in tasks)  # duplicates


def test_the_seed_comes_from_the_environment_or_is_the_fixed_one() -> None:
    assert crash_seed({SEED_VARIABLE: " 42 "}) == 42
    assert crash_seed({}) == crash_seed({SEED_VARIABLE: ""}) == 20310506


def test_about_half_the_kills_wait_for_the_answer_and_lose_it() -> None:
    plan = make_plan(SEED, AGENTS)
    assert len(plan.lose_answer) == len(plan.kill_at)
    assert 0 < sum(plan.lose_answer) < len(plan.kill_at)
