"""``slotward bench chaos``: agents pursue intents through faults; then every promise is checked.

One ``slotward serve`` (``--workers`` processes) on a fresh database, SQLite or
a throwaway PostgreSQL one. Every agent has its own key (priorities 30, 50 or
70: equal rivals and higher ones) and works through its seeded intents
(benchmarks/chaos_faults.py, benchmarks/chaos_agents.py), all agents at once,
while the server is SIGKILLed every ``kill_every`` seconds and started again
on the same port. When every agent is done the server is stopped, the store is
read once, and the outcome (benchmarks/chaos_report.py) counts the store's
duplicates and double bookings, holds each agent's outcome against the store,
and runs the history checker (``slotward.testing.check``) on every recorded
call. Any violation makes the exit status 1. docs/chaos.md says how to read it.
"""

from __future__ import annotations

import asyncio
import math
import sys
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

import aiohttp

from slotward.benchmarks.chaos_agents import Agent, Track
from slotward.benchmarks.chaos_faults import TENANT, make_plan
from slotward.benchmarks.chaos_report import print_summary, summarize, write_json
from slotward.benchmarks.plans import future_start
from slotward.benchmarks.results import db_kind
from slotward.benchmarks.servers import Restartable, make_keys, workspace
from slotward.engine.clock import SystemClock
from slotward.engine.model import Principal
from slotward.testing import Call, check, load_snapshot

__all__ = ["ChaosSettings", "Watch", "chaos", "judge", "run_chaos"]

Watch = Callable[[Sequence[Agent], Restartable], Coroutine[Any, Any, None]]


@dataclass(frozen=True)
class ChaosSettings:
    agents: int
    intents: int
    db: str = "sqlite"
    workers: int = 1
    kill_every: float | None = None  # seconds between kills; None: never
    seed: int = 0
    think: float = 0.2  # an agent's mean pause before each intent, in seconds

    def check(self) -> None:
        if min(self.agents, self.intents, self.workers) < 1:
            raise ValueError("--agents, --intents and --workers must be positive")
        # argparse's float takes "inf" and "nan": a pause that never ends, a kill never due
        if not (math.isfinite(self.think) and self.think >= 0):
            raise ValueError(f"--think must be a finite number of seconds >= 0, not {self.think}")
        if self.kill_every is not None and not (
            math.isfinite(self.kill_every) and self.kill_every > 0
        ):
            raise ValueError(
                f"--kill-every must be a finite positive number of seconds, not {self.kill_every}"
            )


def chaos(settings: ChaosSettings, json_path: Path | None = None, out: IO[str] = sys.stdout) -> int:
    """Run, print the table and the violations, write ``json_path``; 1 on any violation."""
    report, problems = run_chaos(settings)
    print_summary(report, problems, out)
    if json_path is not None:
        write_json(report, json_path)
    return 1 if problems else 0


def run_chaos(
    settings: ChaosSettings, watch: Watch | None = None
) -> tuple[dict[str, Any], list[str]]:
    """The run of ``settings``: the report and its violations. ``watch`` runs beside the
    agents (the demo's live table) and is cancelled when they are done."""
    settings.check()
    plans = make_plan(settings.agents, settings.intents, settings.seed)
    principals = [Principal(TENANT, p.name, "agent", p.priority) for p in plans]
    with workspace(settings.db) as databases:
        url = databases.fresh("chaos")
        secrets = make_keys(url, principals)
        server = Restartable(url, settings.workers, databases.workdir)
        calls: list[Call] = []
        at = future_start()
        agents = [Agent(p, s, server.base, at, calls, settings.seed, settings.think)
                  for p, s in zip(plans, secrets, strict=True)]  # fmt: skip
        started = time.perf_counter()
        try:  # the first start too: one that fails or is interrupted leaves nothing running
            server.start()
            asyncio.run(_drive(server, agents, settings.kill_every, watch))
        finally:
            server.stop()
        seconds = time.perf_counter() - started
        return judge(url, [t for a in agents for t in a.tracks], calls, settings,
                     server_errors=sum(a.server_errors for a in agents), kills=server.kills,
                     seconds=seconds, server_crashes=server.crashes)  # fmt: skip


def judge(
    url: str, tracks: Sequence[Track], calls: Sequence[Call], settings: ChaosSettings, *,
    server_errors: int = 0, kills: int = 0, seconds: float = 0.0,
    server_crashes: Sequence[str] = (),
) -> tuple[dict[str, Any], list[str]]:  # fmt: skip
    """The report and the violations of a run that left the store at ``url``, its agents'
    ``tracks`` and ``calls``: the store read once, the history checked against it."""
    snapshot = load_snapshot(url)
    now = SystemClock().now()  # the snapshot's instant
    history = [f"{v.rule}: {v.detail}" for v in check(calls, snapshot, now)]
    return summarize(
        tracks, snapshot, now, tenant=TENANT, history=history, server_errors=server_errors,
        calls=len(calls), kills=kills, seconds=seconds, server_crashes=server_crashes,
        settings=asdict(settings) | {"db": db_kind(settings.db)},  # never a URL's password
    )  # fmt: skip


async def _drive(
    server: Restartable, agents: Sequence[Agent], kill_every: float | None, watch: Watch | None
) -> None:
    done = asyncio.Event()

    async def everyone() -> None:
        connector = aiohttp.TCPConnector(limit=0)  # one connection per agent and duplicate
        try:
            async with aiohttp.ClientSession(connector=connector) as session:
                await asyncio.gather(*(a.run(session) for a in agents))
        finally:
            done.set()

    try:
        async with asyncio.TaskGroup() as group:
            group.create_task(everyone())
            if kill_every is not None:
                group.create_task(_kill_every(server, kill_every, done))
            if watch is not None:
                watching = group.create_task(watch(agents, server))
                await done.wait()
                watching.cancel()
    except ExceptionGroup as failed:  # a restart that failed (ServerFailed): say that one
        raise failed.exceptions[0] from None


async def _kill_every(server: Restartable, seconds: float, done: asyncio.Event) -> None:
    """SIGKILL the server every ``seconds`` of its uptime and start it again, until done."""
    while not done.is_set():
        try:
            await asyncio.wait_for(done.wait(), seconds)
        except TimeoutError:
            server.kill()
            await asyncio.to_thread(server.start)
