"""How a run is shown: a table and a targets block on stdout, JSON, and a PNG plot.

The JSON (``--json PATH``) is a list with one object per measured scenario
(``scenario``, ``requests``, ``seconds``, ``req_per_s``, ``p50_ms``, ``p90_ms``,
``p99_ms``, ``errors``, ``concurrency``, ``db``, ``workers``, ``client_cpu``,
``server_cpu_us_per_call`` (the server processes' CPU per call, microseconds;
null where not measured), ``statuses`` and the ratios that apply). The plot (``--plot PATH``) needs
matplotlib, the optional extra ``bench``; :func:`plotting_available` says so
before anything is measured.
"""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from slotward.benchmarks.results import Outcome, Result

__all__ = ["MISSING_MATPLOTLIB", "plot", "plotting_available", "print_outcome", "write_json"]

MISSING_MATPLOTLIB = (
    "--plot needs matplotlib, which is not installed: pip install 'slotward[bench]'"
)


def _us(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


_COLUMNS = (
    ("scenario", "<", lambda r: r.scenario),
    ("requests", ">", lambda r: str(r.requests)),
    ("seconds", ">", lambda r: f"{r.seconds:.2f}"),
    ("req/s", ">", lambda r: f"{r.req_per_s:.1f}"),
    ("p50 ms", ">", lambda r: f"{r.p50_ms:.1f}"),
    ("p90 ms", ">", lambda r: f"{r.p90_ms:.1f}"),
    ("p99 ms", ">", lambda r: f"{r.p99_ms:.1f}"),
    ("errors", ">", lambda r: str(r.errors)),
    ("client cpu", ">", lambda r: f"{r.client_cpu:.2f}"),
    ("server us/call", ">", lambda r: _us(r.server_cpu_us_per_call)),
)


def table(results: Sequence[Result]) -> list[str]:
    """The results as aligned text lines, a header first."""
    rows = [[c[0] for c in _COLUMNS]] + [[c[2](r) for c in _COLUMNS] for r in results]
    widths = [max(len(row[i]) for row in rows) for i in range(len(_COLUMNS))]
    return [
        "  ".join(f"{cell:{c[1]}{w}}" for cell, c, w in zip(row, _COLUMNS, widths, strict=True))
        for row in rows
    ]


def print_outcome(outcome: Outcome, out: TextIO) -> None:
    """The table, the targets block, notes and problems."""
    s = outcome.settings
    print(f"slotward bench {outcome.command}: {s.db_kind}, {s.workers} server process(es), "
          f"{os.cpu_count()} cores shared by client and servers", file=out)  # fmt: skip
    for line in table(outcome.results):
        print(line, file=out)
    print("", file=out)
    print("targets (ratios measured in this run):", file=out)
    if not outcome.targets:
        print("  none for this subcommand", file=out)
    width = max((len(t.name) for t in outcome.targets), default=0)
    for t in outcome.targets:
        sign = ">=" if t.at_least else "<="
        verdict = "met" if t.met else "missed"
        print(f"  {t.name:<{width}}  {t.measured:8.2f}  {sign} {t.threshold:<5g}  {verdict}",
              file=out)  # fmt: skip
    for note in outcome.notes:
        print(f"note: {note}", file=out)
    for problem in outcome.problems:
        print(f"PROBLEM: {problem}", file=out)


def write_json(outcome: Outcome, path: Path) -> None:
    """The results as a JSON list, one object per scenario."""
    path.write_text(json.dumps([r.as_json() for r in outcome.results], indent=2) + "\n")


def plotting_available() -> bool:
    return importlib.util.find_spec("matplotlib") is not None


def plot(outcome: Outcome, path: Path) -> None:
    """A PNG: req/s per scenario, and p50/p90/p99 per scenario (or per size, for scale)."""
    import matplotlib  # the optional extra `bench`: imported only when asked

    matplotlib.use("Agg")  # no display needed
    import matplotlib.pyplot as plt

    results = outcome.results
    names = [r.scenario for r in results]
    fig, (rate, latency) = plt.subplots(1, 2, figsize=(12, 4.5))
    rate.bar(names, [r.req_per_s for r in results], color="tab:blue")
    rate.set_ylabel("requests per second")
    rate.set_title("throughput")
    sizes = [r.extra.get("stored_holds") for r in results]
    if all(isinstance(size, int) for size in sizes):
        for label, key in (("p50", "p50_ms"), ("p90", "p90_ms"), ("p99", "p99_ms")):
            latency.plot(sizes, [getattr(r, key) for r in results], marker="o", label=label)
        latency.set_xscale("log")
        latency.set_xlabel("stored holds")
    else:
        step = 0.27
        for i, (label, key) in enumerate((("p50", "p50_ms"), ("p90", "p90_ms"), ("p99", "p99_ms"))):
            xs = [j + (i - 1) * step for j in range(len(results))]
            latency.bar(xs, [getattr(r, key) for r in results], width=step, label=label)
        latency.set_xticks(range(len(results)), names)
    latency.set_ylabel("latency, ms")
    latency.set_title("latency")
    latency.legend()
    for axis in (rate, latency):
        axis.tick_params(axis="x", labelrotation=20)
    s = outcome.settings
    fig.suptitle(f"slotward bench {outcome.command} ({s.db_kind}, {s.workers} worker(s))")
    fig.tight_layout()
    fig.savefig(path, format="png", dpi=100)
    plt.close(fig)
