"""``slotward bench``: the arguments of each benchmark and the dispatch to it."""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from slotward.benchmarks.results import Outcome, Settings

__all__ = ["ABOUT", "add_bench_parser", "run_bench"]

ABOUT = """\
Measure slotward against baselines measured in the same run, and check it.

    slotward bench baseline|throughput|replay|burst|conflicts|race|scale|waiters|relay|providers
        [--db sqlite|postgresql://...]
        [--workers N] [--concurrency C] [--requests N] [--seconds S]
        [--json PATH] [--plot PATH]
    slotward bench pair --before DIR [--after DIR] [--runs N] [--db ...] [--requests N] ...
        (this tree's slotward against another's, in turns; docs/performance.md)
    slotward bench chaos --agents N --intents M [--db ...] [--workers W]
        [--kill-every S] [--seed K] [--json PATH]          (docs/chaos.md)

--db belongs to bench (the global `slotward --db` is not used: a
benchmark never touches the user's database). `sqlite` (the default) runs
every scenario on a fresh file in a temporary directory; a
postgresql://USER@HOST:PORT/DB URL names a server on which the benchmark
creates a throwaway database per scenario and drops it afterwards.

Exit status: 0; 1 when an invariant broke or calls failed unexpectedly (a
missed performance target is reported, not an error); 2 when the benchmark
could not run (a server did not start, matplotlib missing for --plot).
"""

_COMMANDS = {
    "baseline": "the ceilings: a bare JSON echo server and a minimal reference server",
    "throughput": "uncontended creates, commits and releases, against the reference",
    "replay": "replayed duplicates against fresh creates",
    "burst": "never-seen keys arriving together on as many connections: every one served",
    "race": "many agents racing for a few slots; checks every invariant",
    "scale": "claim latency with many stored holds",
    "conflicts": "refused claims on full calendars (409 with alternatives) against fresh creates",
    "waiters": "another tenant's create latency with and without duplicates waiting (wait_ms)",
    "relay": "webhook deliveries per second against a bare client, and commit-to-delivery lag",
    "providers": "claims on attendees bound to a local Radicale against unbound ones, and "
    "the time to mirror a large calendar (Radicale: a dev dependency)",
    "pair": "creates and replays of two source trees' servers in turns: a change against the "
    "code before it, in one run",
}


def add_bench_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``bench`` and its subcommands to the ``slotward`` subparsers ``commands``."""
    bench = commands.add_parser(
        "bench", help="benchmarks (each prints a table; --json, --plot)",
        description=ABOUT, formatter_class=argparse.RawDescriptionHelpFormatter,
    )  # fmt: skip
    kinds = bench.add_subparsers(dest="bench", required=True)
    for name, about in _COMMANDS.items():
        sub = kinds.add_parser(name, help=about, description=about)
        _common(sub, name)
    throughput = kinds.choices["throughput"]
    throughput.add_argument(
        "--tenants", type=int, default=1, help="spread the agents over this many tenants (1)"
    )
    race = kinds.choices["race"]
    race.add_argument("--agents", type=int, default=1000, help="agents, one key each (1000)")
    race.add_argument("--slots", type=int, default=10, help="contested slots (default 10)")
    race.add_argument("--seed", type=int, default=0, help="seed of the agents' choices")
    scale = kinds.choices["scale"]
    scale.add_argument(
        "--sizes", type=_sizes, default=(10_000, 100_000, 1_000_000),
        help="stored holds per run, comma-separated (default 10000,100000,1000000)",
    )  # fmt: skip
    kinds.choices["waiters"].add_argument(
        "--waiters", type=int, default=100, help="duplicates waiting meanwhile (default 100)"
    )
    pair = kinds.choices["pair"]
    pair.add_argument("--before", type=Path, required=True, metavar="DIR",
                      help="the tree to compare against: the directory holding its slotward/ "
                           "(a git worktree of the commit before, say)")  # fmt: skip
    pair.add_argument(
        "--after",
        type=Path,
        metavar="DIR",
        help="the other tree (default: the one this slotward runs from)",
    )
    pair.add_argument(
        "--runs",
        type=int,
        default=1,
        metavar="N",
        help="run the pair N times, every second run with the trees swapped, and read "
        "the change's effect apart from the bench's own lean (default 1: one run)",
    )
    _chaos(kinds)
    calendar = kinds.choices["providers"]
    calendar.add_argument("--events", type=int, default=1000,
                          help="events of the calendar mirrored (default 1000)")  # fmt: skip
    calendar.add_argument("--series", type=int, default=50,
                          help="of them weekly recurring series (default 50)")  # fmt: skip


_CHAOS = ("agents pursue intents through lost answers, rewordings, step drift, duplicates, "
          "rivals and server kills; checks that each landed once or was refused")  # fmt: skip


def _chaos(kinds: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    chaos = kinds.add_parser("chaos", help=_CHAOS, description=_CHAOS + " (docs/chaos.md)")
    chaos.add_argument("--agents", type=int, default=20, help="agents, one key each (20)")
    chaos.add_argument("--intents", type=int, default=10, help="intents per agent (10)")
    chaos.add_argument("--db", dest="bench_db", default="sqlite", metavar="URL",
                       help="'sqlite' (a fresh temporary file; default) or a postgresql:// "
                            "server URL where the benchmark may CREATE DATABASE")  # fmt: skip
    chaos.add_argument("--workers", type=int, default=1, help="server processes (default 1)")
    chaos.add_argument(
        "--kill-every",
        type=float,
        metavar="S",
        help="SIGKILL and restart the server every S seconds (default: never)",
    )
    chaos.add_argument("--seed", type=int, default=0, help="seed of the plan of faults (0)")
    chaos.add_argument("--think", type=float, default=0.2, metavar="S",
                       help="an agent's mean pause before each intent (default 0.2 s)")  # fmt: skip
    chaos.add_argument("--json", type=Path, help="write the report as one JSON object here")


def _run_chaos(args: argparse.Namespace) -> int:
    from slotward.benchmarks.chaos import ChaosSettings, chaos
    from slotward.benchmarks.results import db_kind
    from slotward.benchmarks.servers import ServerFailed

    signal.signal(signal.SIGTERM, _interrupted)
    try:
        db_kind(args.bench_db)
        settings = ChaosSettings(args.agents, args.intents, args.bench_db, args.workers,
                                 args.kill_every, args.seed, args.think)  # fmt: skip
        settings.check()
        return chaos(settings, args.json)
    except (ValueError, ServerFailed, OSError) as error:
        print(f"slotward bench: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("slotward bench: interrupted", file=sys.stderr)
        return 130


def _common(sub: argparse.ArgumentParser, name: str) -> None:
    sub.add_argument("--db", dest="bench_db", default="sqlite", metavar="URL",
                     help="'sqlite' (fresh temporary files; default) or a postgresql:// "
                          "server URL where the benchmark may CREATE DATABASE")  # fmt: skip
    sub.add_argument(
        "--workers", type=int, default=1,
        help="server processes, for slotward and the reference (default 1)",
    )  # fmt: skip
    default = {"scale": 8, "waiters": 8, "burst": 200}.get(name, 64)
    if name == "race":  # --agents is the number of racing agents; they share the connections
        sub.add_argument("--concurrency", type=int, default=default,
                         help=f"concurrent connections (default {default})")  # fmt: skip
    else:
        sub.add_argument(
            "--concurrency", "--agents", dest="concurrency", type=int, default=default,
            help=f"concurrent agents, one connection and key each (default {default})",
        )  # fmt: skip
    requests = 1000 if name == "burst" else 2000  # a burst: 5 of 200
    said = "creates in all, in bursts of --concurrency" if name == "burst" else (
        "requests per measured scenario")  # fmt: skip
    if name != "race":  # a race's calls follow from its agents
        sub.add_argument("--requests", type=int, default=requests,
                         help=f"{said} (default {requests})")  # fmt: skip
    sub.add_argument("--seconds", type=float, default=60.0,
                     help="time bound per measured scenario (default 60)")  # fmt: skip
    sub.add_argument("--json", type=Path, help="write the results as JSON here")
    sub.add_argument("--plot", type=Path, help="draw the results as a PNG here (matplotlib)")


def _sizes(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(part) for part in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"not a comma-separated list of counts: {text!r}"
        ) from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError("sizes must be positive")
    return sizes


def run_bench(args: argparse.Namespace) -> int:
    """Run the benchmark ``args`` name, print it, write what was asked; the exit status."""
    from slotward.benchmarks import report
    from slotward.benchmarks.results import Settings, db_kind
    from slotward.benchmarks.servers import ServerFailed

    if args.bench == "chaos":  # a report of its own, not a table of measured scenarios
        return _run_chaos(args)
    if args.plot is not None and not report.plotting_available():
        print(f"slotward bench: {report.MISSING_MATPLOTLIB}", file=sys.stderr)
        return 2
    # Stopped with SIGTERM, unwind as for Ctrl-C: servers stopped, databases dropped.
    signal.signal(signal.SIGTERM, _interrupted)
    try:
        db_kind(args.bench_db)
        requests = getattr(args, "requests", args.concurrency)
        counts = (args.workers, args.concurrency, requests, getattr(args, "tenants", 1),
                  getattr(args, "waiters", 1))  # fmt: skip
        if min(counts) < 1 or args.seconds <= 0:
            raise ValueError("every count and --seconds must be positive")
        settings = Settings(db=args.bench_db, workers=args.workers, concurrency=args.concurrency,
                            requests=requests, seconds=args.seconds)  # fmt: skip
        outcome = _dispatch(args, settings)
    except (ValueError, ServerFailed, OSError) as error:
        print(f"slotward bench: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # everything started is stopped and removed by now
        print("slotward bench: interrupted", file=sys.stderr)
        return 130
    report.print_outcome(outcome, sys.stdout)
    if args.json is not None:
        report.write_json(outcome, args.json)
    if args.plot is not None:
        report.plot(outcome, args.plot)
    return 1 if outcome.problems else 0


def _interrupted(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def _dispatch(args: argparse.Namespace, settings: Settings) -> Outcome:
    # Imported here: `slotward serve` should not load the benchmarks.
    if args.bench == "baseline":
        from slotward.benchmarks.baseline import baseline

        return baseline(settings)
    if args.bench in ("throughput", "replay"):
        from slotward.benchmarks.throughput import replay, throughput

        return throughput(settings, tenants=args.tenants) if args.bench == "throughput" else (
            replay(settings))  # fmt: skip
    if args.bench == "burst":
        from slotward.benchmarks.burst import burst

        return burst(settings)
    if args.bench == "race":
        from slotward.benchmarks.race import race

        return race(settings, agents=args.agents, slots=args.slots, seed=args.seed)
    if args.bench == "relay":
        from slotward.benchmarks.relay import relay

        return relay(settings)
    if args.bench == "providers":
        from slotward.benchmarks.providers import providers

        return providers(settings, events=args.events, series=args.series)
    if args.bench == "pair":
        if args.runs != 1:
            from slotward.benchmarks.pair_runs import pair_runs

            return pair_runs(settings, args.before, args.after, args.runs)
        from slotward.benchmarks.pair import pair

        return pair(settings, args.before, args.after)
    if args.bench == "conflicts":
        from slotward.benchmarks.conflicts import conflicts

        return conflicts(settings)
    if args.bench == "waiters":
        from slotward.benchmarks.waiters import waiters

        return waiters(settings, count=args.waiters)
    from slotward.benchmarks.scale import scale

    return scale(settings, sizes=args.sizes)
