"""What a benchmark run measured: one :class:`Result` per scenario, the targets, the verdict.

A result is built from one phase of the load generator's answer. Every figure
about slotward's speed is read as a ratio to a baseline measured in the same
run (:class:`Target`): the machines are shared and noisy, absolute figures are
not comparable between runs.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from slotward.benchmarks.cpu import per_call_us

__all__ = [
    "Outcome",
    "Result",
    "Settings",
    "Target",
    "cpu_ratio",
    "db_kind",
    "percentile",
    "pooled",
    "ratio",
]


def db_kind(db: str) -> str:
    """``sqlite`` or ``postgresql``, from a ``--db`` value; ValueError for anything else."""
    if db.startswith("sqlite"):
        return "sqlite"
    if db.startswith(("postgresql", "postgres")):
        return "postgresql"
    raise ValueError(f"--db must be 'sqlite' or a postgresql:// server URL, not {db!r}")


@dataclass(frozen=True)
class Settings:
    """The options every subcommand shares."""

    db: str = "sqlite"  # 'sqlite', or a postgresql:// server URL
    workers: int = 1
    concurrency: int = 64
    requests: int = 2000
    seconds: float = 60.0  # bound per measured phase

    @property
    def db_kind(self) -> str:
        return db_kind(self.db)


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The nearest-rank ``q``-quantile (0 < q <= 1) of sorted values; 0.0 for none."""
    if not sorted_values:
        return 0.0
    rank = max(1, math.ceil(q * len(sorted_values)))
    return float(sorted_values[min(rank, len(sorted_values)) - 1])


def ratio(numerator: float, denominator: float) -> float:
    """``numerator / denominator``, rounded; ``inf`` when the denominator is zero."""
    return round(numerator / denominator, 3) if denominator else math.inf


def pooled(phases: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Load generator phases of one kind as one: their calls, times and CPU added up."""
    out: dict[str, Any] = {
        "requests": 0, "seconds": 0.0, "latencies_ms": [], "errors": 0, "error_samples": [],
        "cpu_seconds": 0.0, "replayed": 0, "statuses": Counter(), "codes": Counter(),
        "stopped_early": False,
    }  # fmt: skip
    for p in phases:
        for name in ("requests", "seconds", "errors", "cpu_seconds", "replayed"):
            out[name] += p[name]
        if p.get("server_cpu_seconds") is not None:
            out["server_cpu_seconds"] = out.get("server_cpu_seconds", 0.0) + p["server_cpu_seconds"]
        out["latencies_ms"] += p["latencies_ms"]
        out["error_samples"] += p["error_samples"]
        out["statuses"].update(p["statuses"])
        out["codes"].update(p["codes"])
        out["stopped_early"] |= bool(p["stopped_early"])
    out["latencies_ms"].sort()
    out["statuses"], out["codes"] = dict(out["statuses"]), dict(out["codes"])
    return out


@dataclass
class Result:
    """One measured scenario: the fields the JSON and the table share."""

    scenario: str
    requests: int
    seconds: float
    req_per_s: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    errors: int
    concurrency: int
    db: str
    workers: int
    client_cpu: float  # the load generator's CPU seconds per wall second
    # The server's own CPU (its processes' user + system time) over the calls, per
    # call: far steadier than a rate on a shared machine. None: not measured.
    server_cpu_us_per_call: float | None = None
    statuses: dict[str, int] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)  # ratios and what else applies

    @classmethod
    def of(
        cls, scenario: str, phase: Mapping[str, Any], settings: Settings, concurrency: int
    ) -> Result:
        """The result of one load generator phase."""
        lat: list[float] = list(phase["latencies_ms"])
        seconds = float(phase["seconds"])
        requests = int(phase["requests"])
        return cls(
            scenario=scenario,
            requests=requests,
            seconds=round(seconds, 6),
            req_per_s=round(requests / seconds, 1) if seconds > 0 else 0.0,
            p50_ms=round(percentile(lat, 0.50), 2),
            p90_ms=round(percentile(lat, 0.90), 2),
            p99_ms=round(percentile(lat, 0.99), 2),
            errors=int(phase["errors"]),
            concurrency=concurrency,
            db=settings.db_kind,
            workers=settings.workers,
            client_cpu=round(float(phase["cpu_seconds"]) / seconds, 2) if seconds > 0 else 0.0,
            server_cpu_us_per_call=per_call_us(phase.get("server_cpu_seconds"), requests),
            statuses=dict(phase["statuses"]),
            extra={"replayed": int(phase["replayed"]), "codes": dict(phase["codes"])},
        )

    def as_json(self) -> dict[str, Any]:
        """The JSON object: the fields, with ``extra`` merged in."""
        doc = asdict(self)
        return {**{k: v for k, v in doc.items() if k != "extra"}, **self.extra}


def cpu_ratio(mine: Result, other: Result) -> float | None:
    """``mine``'s server CPU per call over ``other``'s; None where either was not measured."""
    a, b = mine.server_cpu_us_per_call, other.server_cpu_us_per_call
    return None if a is None or b is None else ratio(a, b)


@dataclass(frozen=True)
class Target:
    """A goal stated as a ratio: ``measured`` against ``threshold`` (``>=`` or ``<=``)."""

    name: str
    measured: float
    threshold: float
    at_least: bool  # True: measured >= threshold; False: measured <= threshold

    @property
    def met(self) -> bool:
        if math.isnan(self.measured):
            return False
        return self.measured >= self.threshold if self.at_least else self.measured <= self.threshold

    def as_json(self) -> dict[str, Any]:
        return {
            "target": self.name,
            "measured": self.measured,
            "threshold": self.threshold,
            "comparison": ">=" if self.at_least else "<=",
            "met": self.met,
        }


@dataclass
class Outcome:
    """A subcommand's results, its targets, and what broke (a non-empty ``problems``
    means an invariant broke or calls failed unexpectedly: a non-zero exit)."""

    command: str
    settings: Settings
    results: list[Result] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def add(self, result: Result, phase: Mapping[str, Any]) -> Result:
        """Keep ``result``; its errors (no answer, an unexpected status) are problems."""
        self.results.append(result)
        if phase.get("errors"):
            samples = "; ".join(phase.get("error_samples", []))
            self.problems.append(f"{result.scenario}: {phase['errors']} calls failed ({samples})")
        if phase.get("stopped_early"):
            self.notes.append(f"{result.scenario}: stopped at the time bound after "
                              f"{result.requests} requests")  # fmt: skip
        return result
