"""The crash test's workload: a seeded plan (tests/e2e/crash_plan.py) run by eight
agents against a server that is SIGKILLed at the plan's kill points.

The planned calls go out strictly in plan order (a ``Sequencer`` hands out
turns), while their answers overlap: an agent waits only for its own last
answer. A call counts as gone out when aiohttp hands its body to the socket.
Right after the call at a kill point, or as its answer arrives (then the client
drops that answer), the server is killed; the calls after it
wait until the server is back and the calls it cut off have settled (a lost
answer is retried). So a seed fixes every call, the order they go out in, and
which had gone out at each kill. It cannot fix how far the server had got with
the calls in flight when it died, nor, under contention, which of two calls in
flight together it served first; so the answers, and what depends on them (which
hold a commit finds, whether there is one), may differ from run to run.

tests/e2e/test_crash.py runs it and checks what is left.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from slotward.api.bootstrap import open_store
from slotward.api.config import Config
from slotward.api.keys import create_key
from slotward.engine.clock import SystemClock, TimeOrderedIds
from slotward.engine.model import Principal
from slotward.testing.recorded import Call, Op
from tests.e2e.crash_plan import SEED, Plan, Task, acquire_label, execution
from tests.e2e.crash_recorder import Agent, Recorder, Sent

CLI = [sys.executable, "-m", "slotward.api.cli.main"]
ENV = {**os.environ, "SLOTWARD_SWEEP_INTERVAL": "0.2", "SLOTWARD_LOG_LEVEL": "WARNING"}
SEED_VARIABLE = "SLOTWARD_CRASH_SEED"
TENANTS = ("crash-a", "crash-b")
PRIORITIES = (10, 50, 90, 50)  # per agent of a tenant
_DATABASES = itertools.count()


def crash_seed(environ: Mapping[str, str]) -> int:
    """``SLOTWARD_CRASH_SEED`` if set (an integer), else the fixed default."""
    raw = environ.get(SEED_VARIABLE, "").strip()
    try:
        return int(raw) if raw else SEED
    except ValueError:
        raise ValueError(f"{SEED_VARIABLE} must be an integer, not {raw!r}") from None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """``slotward serve`` on one port, killed and started again at will."""

    def __init__(self, url: str, log: Path) -> None:
        self.url, self.port, self.log = url, _free_port(), log
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self._closed = False  # stopped for good: a start still running in a thread gives up
        self._lock = threading.Lock()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        with self._lock, self.log.open("a") as out:  # a file, never a pipe nobody drains
            if self._closed:
                raise RuntimeError("the server was stopped for good")
            self.proc = subprocess.Popen(
                [*CLI, "--db", self.url, "serve", "--port", str(self.port)],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=ENV,
            )
            self.starts += 1
        deadline = time.monotonic() + 30
        while True:  # readiness, bounded; not a timing assertion
            try:
                urllib.request.urlopen(f"{self.base}/healthz", timeout=1).close()
                return
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"server did not start:\n{self.log.read_text()}") from None
                time.sleep(0.01)

    def signal_kill(self) -> None:
        """SIGKILL, without waiting: from the event loop, at an exact point of a client."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)

    def reap(self) -> None:
        assert self.proc is not None
        self.proc.wait(timeout=30)

    def stop(self) -> int:
        """SIGTERM: a clean shutdown; the exit code."""
        assert self.proc is not None
        self.proc.terminate()
        return self.proc.wait(timeout=60)

    def ensure_stopped(self) -> None:
        """Killed if running, and never started again."""
        with self._lock:
            self._closed = True
            if self.proc is not None and self.proc.poll() is None:
                self.signal_kill()
                self.reap()


async def make_agents(url: str) -> list[Agent]:
    """Two tenants of four agents (priorities ``PRIORITIES``), with fresh API keys."""
    config = Config(db_url=url)
    store = await open_store(config)
    clock, ids, agents = SystemClock(), TimeOrderedIds(), []
    try:
        for tenant in TENANTS:
            for i, priority in enumerate(PRIORITIES):
                principal = Principal(tenant, f"agent-{i}", "agent", priority)
                made = await store.write(
                    partial(create_key, principal=principal, clock=clock, ids=ids,
                            hasher=config.key_hasher())
                )  # fmt: skip
                agents.append(Agent(tenant, principal.agent_id, made.secret))
    finally:
        await store.close()
    return agents


@dataclass
class Kills:
    """Where the server was killed: after which planned calls, and when (epoch seconds).

    ``after`` grows as a kill point's call goes out, ``at`` as the kill happens: a
    run that failed while a kill waited for an answer has one more ``after``."""

    after: list[int] = field(default_factory=list)
    at: list[float] = field(default_factory=list)


class Sequencer:
    """Turns strictly in plan order, and the kills.

    A planned call goes once the one before it has gone out (its body written, or
    it was skipped). Right after the call at a kill point, or as its answer
    arrives (the plan's ``lose_answer``; the client then drops that answer), the
    server is killed;
    the calls after it wait until the server is back and every call the kill cut
    off has settled (answered, or retried to the end), so each kill follows
    exactly the calls up to its point and the plan resumes with every agent free.
    """

    def __init__(self, plan: Plan, server: Server, tasks: asyncio.TaskGroup, kills: Kills) -> None:
        self._next = 0  # the plan index whose turn it is
        self._open: set[int] = set()  # planned calls under way
        self._recovering = False  # killed: until restarted and every open call settled
        self._restarting = False
        losing = plan.lose_answer or (False,) * len(plan.kill_at)
        self._pending = list(zip(plan.kill_at, losing, strict=True))
        self._awaiting: int | None = None  # the kill point whose answer the kill waits for
        self._changed = asyncio.Event()
        self._server, self._tasks, self._kills = server, tasks, kills

    async def turn(self, index: int) -> None:
        while index != self._next or self._recovering:
            await self._changed.wait()
        self._open.add(index)

    def went(self, index: int) -> None:
        """The call's body is being written (or it was skipped, or never went out)."""
        if index != self._next:
            return  # said already
        self._next += 1
        if self._pending and index == self._pending[0][0]:
            _, lose_answer = self._pending.pop(0)
            self._kills.after.append(index)
            self._recovering = True  # nothing more goes out
            if lose_answer:
                self._awaiting = index
            else:  # after this write has reached the socket: the writer runs on to it first
                asyncio.get_running_loop().call_soon(self._kill)
        self._notify()

    def lose(self, index: int) -> bool:
        """The answer to ``index`` has arrived: True if it is to be lost (the server
        is killed now, so its next call finds it gone)."""
        if self._awaiting != index:
            return False
        self._awaiting = None
        self._kill()
        return True

    def _kill(self) -> None:
        self._restarting = True
        self._kills.at.append(time.time())
        self._server.signal_kill()
        with contextlib.suppress(RuntimeError):  # the run is failing: no restart then
            self._tasks.create_task(self._restart())

    async def back(self) -> None:
        """For a refused retry: once the server is up again (when it is up, a short poll)."""
        while self._restarting:
            await self._changed.wait()
        await asyncio.sleep(0.01)

    def settled(self, index: int) -> None:
        if self._awaiting == index:  # it ended without an answer: the kill is due anyway
            self.lose(index)
        self._open.discard(index)
        self._notify()

    async def _restart(self) -> None:
        await asyncio.to_thread(self._server.reap)
        await asyncio.to_thread(self._server.start)
        self._restarting = False
        self._notify()

    def _notify(self) -> None:
        self._recovering = self._recovering and (self._restarting or bool(self._open))
        self._changed.set()
        self._changed = asyncio.Event()


@dataclass
class _Run:
    rec: Recorder
    seq: Sequencer
    seed: int

    async def call(
        self, index: int, agent: Agent, op: Op, path: str, bodies: Sequence[dict[str, Any]],
        intent: str, target: str | None = None,
    ) -> Call:  # fmt: skip
        await self.seq.turn(index)
        retry = random.Random(f"{self.seed}:{index}")  # this call's retries, whatever the timing
        sent = Sent(index, partial(self.seq.went, index), partial(self.seq.lose, index))
        try:
            return await self.rec.send(agent, op, path, bodies, retry, intent=intent,
                                       target=target, sent=sent, back=self.seq.back)  # fmt: skip
        finally:
            self.seq.went(index)  # also when its body never went out
            self.seq.settled(index)

    async def skip(self, index: int) -> None:
        """A planned call there is nothing for (no hold to commit): its turn passes."""
        await self.seq.turn(index)
        self.seq.went(index)
        self.seq.settled(index)


async def run_plan(
    server: Server, agents: Sequence[Agent], plan: Plan, rec: Recorder, kills: Kills
) -> None:
    """An abandoned lease first (it must outlive every crash), then the plan, with its
    kills (logged in ``kills`` as they happen)."""
    retry = random.Random(f"{plan.seed}:orphan")
    body, agent = execution(-1, 1), agents[0]
    intent = f"{agent.tenant} {acquire_label(body['workflow_id'], body['tool'])}"
    orphan = await rec.send(agent, "acquire", "/v1/executions", [body], retry, intent=intent)
    assert orphan.status == 201, orphan
    async with asyncio.TaskGroup() as tasks:
        seq = Sequencer(plan, server, tasks, kills)
        run = _Run(rec, seq, plan.seed)
        for agent, agent_tasks in zip(agents, plan.tasks, strict=True):
            tasks.create_task(_agent(run, agent, agent_tasks))


async def _agent(run: _Run, agent: Agent, tasks: Sequence[Task]) -> None:
    holds: list[dict[str, Any]] = []  # the create answers that gave this agent a hold
    for task in tasks:
        await _DO[task.kind](run, agent, task, holds)


async def _create(run: _Run, agent: Agent, task: Task, holds: list[dict[str, Any]]) -> None:
    for index in task.calls:
        call = await run.call(index, agent, "create", "/v1/holds", task.bodies,
                              f"{agent.tenant} {task.label}")  # fmt: skip
        doc = call.document()
        if call.status == 201 and doc.get("agent_id") == agent.name:
            holds.append(doc)


async def _commit(run: _Run, agent: Agent, task: Task, holds: list[dict[str, Any]]) -> None:
    hold = holds[int(task.pick * len(holds))] if holds else None
    await _move(run, agent, task, hold, "commit", {"token": hold["token"]} if hold else {})


async def _release(run: _Run, agent: Agent, task: Task, holds: list[dict[str, Any]]) -> None:
    hold = holds.pop(int(task.pick * len(holds))) if holds else None
    await _move(run, agent, task, hold, "release", {})


async def _move(
    run: _Run, agent: Agent, task: Task, hold: dict[str, Any] | None, op: Op, body: dict[str, Any]
) -> None:
    for index in task.calls:
        if hold is None:
            await run.skip(index)
            continue
        path, intent = f"/v1/holds/{hold['id']}/{op}", f"{agent.tenant} {op} {hold['id']}"
        await run.call(index, agent, op, path, [body], intent, hold["id"])


async def _execution(run: _Run, agent: Agent, task: Task, holds: list[dict[str, Any]]) -> None:
    acquire, *completion = task.calls
    call = await run.call(acquire, agent, "acquire", "/v1/executions", task.bodies,
                          f"{agent.tenant} {task.label}")  # fmt: skip
    for index in completion:
        if call.status != 201:  # not ours to complete
            await run.skip(index)
            continue
        lease = call.document()
        result = {"n": task.bodies[0]["arguments"]["n"], "by": f"{agent.tenant}/{agent.name}"}
        done = {"lease_token": lease["lease_token"], "outcome": task.outcome, "result": result}
        await run.call(index, agent, "complete", f"/v1/executions/{lease['key']}/complete",
                       [done], complete_intent(agent.tenant, lease), lease["key"])  # fmt: skip


def complete_intent(tenant: str, lease: Mapping[str, Any]) -> str:
    """A completion's intent: the key's, under one lease token."""
    return f"{tenant} complete {lease['key']} token {lease['lease_token']}"


_DO: Mapping[str, Callable[[_Run, Agent, Task, list[dict[str, Any]]], Awaitable[None]]] = {
    "create": _create,
    "commit": _commit,
    "release": _release,
    "execution": _execution,
}
