"""The CPU a server spent: user + system seconds of a process and its descendants.

Read from ``/proc`` (Linux), where the kernel counts every thread of a
process; a descendant that exited and was waited for is counted in its
parent's ``cutime``/``cstime``, so a worker restarted mid-phase is not lost.
Where ``/proc`` cannot tell (another OS, a process gone) the count is 0: the
benchmark still runs and reports its rates.

CPU seconds over the calls of a phase are far steadier than rates on a shared
machine: another tenant's work slows a server down, but does not make it spend
more CPU per call.
"""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["cpu_seconds", "per_call_us", "tree_cpu_seconds"]

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
_PROC = Path("/proc")


def _stat(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name, or None."""
    try:
        text = (_PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()


def cpu_seconds(pid: int) -> float:
    """The user + system CPU seconds of process ``pid`` alone (its threads included)."""
    fields = _stat(pid)
    return (int(fields[11]) + int(fields[12])) / _TICKS if fields else 0.0


def _descendants(pid: int) -> set[int]:
    """``pid`` and every live process below it."""
    parents: dict[int, list[int]] = {}
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat(int(entry.name))
        if fields is not None:
            parents.setdefault(int(fields[1]), []).append(int(entry.name))
    found, todo = {pid}, [pid]
    while todo:
        for child in parents.get(todo.pop(), ()):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def tree_cpu_seconds(pid: int) -> float:
    """The CPU seconds of ``pid`` and its descendants, the ones already reaped included."""
    total = 0
    for member in _descendants(pid):
        fields = _stat(member)
        if fields is not None:  # utime, stime, cutime, cstime
            total += sum(int(fields[i]) for i in (11, 12, 13, 14))
    return total / _TICKS


def per_call_us(cpu: float | None, calls: int) -> float | None:
    """Microseconds of server CPU per call, rounded; None when not measured."""
    if cpu is None or calls <= 0:
        return None
    return round(cpu / calls * 1e6, 1)
