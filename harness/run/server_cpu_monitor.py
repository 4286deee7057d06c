"""The CPU a server that `run` started itself got over a level, and what others took meanwhile,
read from /proc (harness.results.server_cpu judges them).

A process tree's CPU time is the utime + stime of each live process in it, plus the cutime +
cstime of each: what its children that ended and were waited for had used. So a child that
ends during a level (a restarted writer, a worker vLLM replaced) still counts, to the parent
that reaped it. Reading every /proc/PID/stat takes a few ms (a few hundred processes): done
once as a pass starts and once as it ends, off the measured requests.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from common import proc_tree
from harness.results.server_cpu import ServerCpu, measured

PROC = Path("/proc")
_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK")
# /proc/stat's cpu line: user nice system idle iowait irq softirq steal; busy is all but idle
# and iowait (guest time is inside user already)
_BUSY_FIELDS = (0, 1, 2, 5, 6, 7)


@dataclass(slots=True, frozen=True)
class _Sample:
    wall_s: float
    busy_s: float
    server_s: float
    own_s: float


def machine_busy() -> tuple[float, int] | None:
    """The machine's busy CPU seconds since boot and how many CPUs it counts them over; None
    where /proc/stat cannot be read."""
    try:
        lines = (PROC / "stat").read_text().splitlines()
        ticks = [int(v) for v in lines[0].split()[1:]]
    except (OSError, ValueError, IndexError):
        return None
    cpus = sum(1 for line in lines if line.startswith("cpu") and line[3:4].isdigit())
    return sum(ticks[i] for i in _BUSY_FIELDS if i < len(ticks)) * _TICK_S, max(cpus, 1)


def _processes() -> dict[int, tuple[int, int]]:
    """Every process's parent and CPU ticks (its own and its reaped children's)."""
    stats = (proc_tree.read_stat(pid) for pid in proc_tree.listed_pids())
    return {s.pid: (s.ppid, s.user_ticks + s.system_ticks + s.children_ticks)
            for s in stats if s is not None}  # None: it ended meanwhile


def tree_ticks(processes: dict[int, tuple[int, int]], root: int,
               excluded: int | None = None) -> int:
    """The CPU ticks of `root` and its descendants, the subtree of `excluded` left out."""
    children: dict[int, list[int]] = {}
    for pid, (parent, _) in processes.items():
        children.setdefault(parent, []).append(pid)
    total, stack = 0, [root] if root in processes else []
    while stack:
        pid = stack.pop()
        total += processes[pid][1]
        stack.extend(c for c in children.get(pid, ()) if c != excluded)
    return total


class ServerCpuMonitor:
    """`start()` as a pass of a level starts, `stop()` as it ends gives the pass's ServerCpu
    (None where /proc cannot be read); `server_pid` roots the server's process tree, this
    process the run's own (the server's left out of it)."""

    def __init__(self, server_pid: int) -> None:
        self.server_pid = server_pid
        self._start: _Sample | None = None

    def _sample(self) -> tuple[_Sample, int] | None:
        machine = machine_busy()
        if machine is None:
            return None
        processes = _processes()
        server = tree_ticks(processes, self.server_pid)
        own = tree_ticks(processes, os.getpid(), excluded=self.server_pid)
        return _Sample(time.perf_counter(), machine[0], server * _TICK_S, own * _TICK_S), \
            machine[1]

    def start(self) -> None:
        sample = self._sample()
        self._start = sample[0] if sample else None

    def stop(self) -> ServerCpu | None:
        sample, start, self._start = self._sample(), self._start, None
        if sample is None or start is None:
            return None
        end, cpus = sample
        return measured(end.wall_s - start.wall_s, cpus, end.busy_s - start.busy_s,
                        max(0.0, end.server_s - start.server_s),
                        max(0.0, end.own_s - start.own_s))
