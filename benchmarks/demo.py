"""``slotward demo``: 20 chaos agents against a server of its own, watched live.

The chaos harness of ``slotward bench chaos`` (benchmarks/chaos.py), small:
its own ``slotward serve`` on a temporary SQLite file, SIGKILLed and
restarted every few seconds, and 20 agents booking through lost answers,
reworded retries, step drift, duplicates and rivals. On a terminal a live
table (``rich``) shows what each agent is trying and what it got; elsewhere
(a pipe, CI) the table is printed once at the end. Then the run's report and
its invariant check, the same as the bench's. Under a minute; nothing to set
up, nothing left behind.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections import Counter
from collections.abc import Sequence
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:  # imported when the demo runs: `slotward serve` need not load them
    from rich.table import Table

    from slotward.benchmarks.chaos_agents import Agent
    from slotward.benchmarks.servers import Restartable

__all__ = ["add_demo_parser", "run_demo"]

_ABOUT = ("20 agents book through lost answers, reworded retries, step drift, duplicates, "
          "rivals and server kills; watch them, then the invariants are checked")  # fmt: skip


def add_demo_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``demo`` to the ``slotward`` subparsers ``commands``."""
    demo = commands.add_parser("demo", help=_ABOUT, description=_ABOUT + " (docs/chaos.md)")
    demo.add_argument("--agents", type=int, default=20, help="agents (default 20)")
    demo.add_argument("--intents", type=int, default=8, help="intents per agent (default 8)")
    demo.add_argument("--kill-every", type=float, default=2.0, metavar="S",
                      help="SIGKILL and restart the server every S s (default 2)")  # fmt: skip
    demo.add_argument("--think", type=float, default=0.5, metavar="S",
                      help="an agent's mean pause before each intent (default 0.5 s)")  # fmt: skip
    demo.add_argument("--seed", type=int, default=0, help="seed of the plan of faults (0)")


def run_demo(args: argparse.Namespace, out: IO[str] = sys.stdout) -> int:
    """Run the demo of ``args``; 0 when every invariant held, 1 otherwise, 2 if it cannot run."""
    from rich.console import Console
    from rich.live import Live

    from slotward.benchmarks.chaos import ChaosSettings, run_chaos
    from slotward.benchmarks.chaos_report import print_summary
    from slotward.benchmarks.servers import ServerFailed

    console = Console(file=out)
    if not console.is_terminal:  # a log: one line per agent, however wide
        console = Console(file=out, width=200)
    settings = ChaosSettings(args.agents, args.intents, "sqlite", 1, args.kill_every, args.seed,
                             args.think)  # fmt: skip
    seen: list[Agent] = []

    async def watch(agents: Sequence[Agent], server: Restartable) -> None:
        seen.extend(agents)
        if not console.is_terminal:
            return
        with Live(_table(agents, server), console=console, refresh_per_second=4) as live:
            try:
                while True:
                    await asyncio.sleep(0.25)
                    live.update(_table(agents, server))
            finally:  # cancelled once the agents are done: leave their final state shown
                live.update(_table(agents, server))

    try:
        settings.check()
        report, problems = run_chaos(settings, watch)
    except (ValueError, ServerFailed, OSError) as error:
        print(f"slotward demo: {error}", file=sys.stderr)
        return 2
    if not console.is_terminal:
        console.print(_table(seen, None))
    print_summary(report, problems, out)
    return 1 if problems else 0


def _table(agents: Sequence[Agent], server: Restartable | None) -> Table:
    from rich.table import Table

    title = "slotward demo: chaos agents"
    if server is not None:
        title += f" (server killed {server.kills} times)"
    table = Table(title=title)
    for column in ("agent", "prio", "intent", "attempts"):
        table.add_column(column, no_wrap=True)
    for column in ("faults injected", "outcomes", "last"):  # these wrap on a narrow terminal
        table.add_column(column)
    for agent in agents:
        tracks = agent.tracks
        last = tracks[-1] if tracks else None
        faults = Counter(f.removeprefix("lost-create").replace("lost-", "lost ") or "lost"
                         for t in tracks for f in t.injected)  # fmt: skip
        outcomes = Counter(t.outcome for t in tracks if t.outcome != "pending")
        said = "-" if last is None else last.outcome + (f" ({last.reason})" if last.reason else "")
        table.add_row(
            agent.plan.name, str(agent.plan.priority),
            f"{len(tracks)}/{len(agent.plan.intents)}",
            str(sum(t.attempts for t in tracks)),
            ", ".join(f"{k} {n}" for k, n in sorted(faults.items())) or "-",
            ", ".join(f"{k} {n}" for k, n in sorted(outcomes.items())) or "-",
            said,
        )  # fmt: skip
    return table
