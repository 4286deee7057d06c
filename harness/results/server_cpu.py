"""Whether the machine, not the server, was the limit at a level: the CPU a server that `run`
started itself got, and the CPU every other process on the machine took meanwhile.

A bundled server shares the machine's CPUs with the run's own processes and with whatever
else runs there. Over each pass of a level the run reads (harness.run.server_cpu_monitor) the
CPU time of the server's process tree, of the run's own processes (the CLI and its children:
the writer, the progress bar, load workers) and of the whole machine (/proc/stat's busy time,
steal included: CPU another guest of the host took). What is left of the machine's busy time
after the two trees is *others'*, and what no process used is *idle*. A level is
*server-starved* when others took more than OTHERS_SHARE_LIMIT of the machine's CPU time (its
CPUs x the pass's wall time) and the machine had less than IDLE_SHARE_LIMIT of it left idle:
the server had to wait for a CPU others held, and its TTFT and TPS may say more about the
machine than about the server. A machine with CPUs to spare does not starve a server, however
busy its other processes are.

The limits come from the bundled spark server's C=1 level on a 2-core machine, alone and
beside other work (docs/running.md#server-cpu): alone it kept 1.21 cores busy at 30.0 tok/s and
left ~38 % of the machine idle; with others at 43 % (10 % idle) it got 0.92 cores and 22.6
tok/s, and with others at 63-74 % 0.48-0.70 cores and 6-14 tok/s. Others past 35 % take CPU the
server wants; a machine with a fifth of its CPU time idle had a CPU for it.
"""

from __future__ import annotations

from dataclasses import dataclass

OTHERS_SHARE_LIMIT = 0.35  # of the machine's CPU time (CPUs x wall time)
IDLE_SHARE_LIMIT = 0.2  # ... and no more of it idle: the machine was full


@dataclass(slots=True, frozen=True)
class ServerCpu:
    """CPU seconds over one pass of a level, from /proc."""

    wall_s: float
    cpus: int  # the CPUs /proc/stat counts
    server_cpu_s: float  # the server's process tree
    own_cpu_s: float  # the run's own processes
    others_cpu_s: float  # every other process on the machine (steal included)

    @property
    def server_cores(self) -> float | None:
        """The server's CPU seconds per wall second: the cores it kept busy."""
        return self.server_cpu_s / self.wall_s if self.wall_s > 0 else None

    @property
    def others_share(self) -> float | None:
        """Others' share of the machine's CPU time over the pass."""
        capacity = self.wall_s * self.cpus
        return self.others_cpu_s / capacity if capacity > 0 else None

    @property
    def idle_share(self) -> float | None:
        """The share of the machine's CPU time no process used."""
        capacity = self.wall_s * self.cpus
        used = self.server_cpu_s + self.own_cpu_s + self.others_cpu_s
        return max(0.0, 1 - used / capacity) if capacity > 0 else None

    @property
    def server_starved(self) -> bool:
        others, idle = self.others_share, self.idle_share
        return (others is not None and idle is not None and others > OTHERS_SHARE_LIMIT
                and idle < IDLE_SHARE_LIMIT)


def measured(wall_s: float, cpus: int, busy_s: float, server_s: float,
             own_s: float) -> ServerCpu:
    """A pass's figures from the deltas of the machine's busy time and the two trees' CPU
    time; the clock ticks they are counted in can leave others a tick below zero: none."""
    return ServerCpu(wall_s=wall_s, cpus=cpus, server_cpu_s=server_s, own_cpu_s=own_s,
                     others_cpu_s=max(0.0, busy_s - server_s - own_s))


def most_starved(passes: list[ServerCpu]) -> ServerCpu:
    """A level's passes as one: the pass whose others took the largest share."""
    return max(passes, key=lambda p: p.others_share or 0.0)


def describe(name: str, c: ServerCpu) -> str:
    """One sentence for a server-starved level."""
    return (f"{name}: the server was starved of CPU: other processes on this machine took "
            f"{c.others_share or 0:.0%} of its {c.cpus} CPUs' time (over "
            f"{OTHERS_SHARE_LIMIT:.0%}, {c.idle_share or 0:.0%} left idle) while the server "
            f"used {c.server_cores or 0:.2f} cores; its TTFT and TPS may say more about the "
            "machine than about the server: measure it again on a quiet machine")


def starved_because(name: str, c: ServerCpu) -> str:
    """The clause that qualifies a verdict decided by a starved level."""
    return (f"{name} failed while the server was starved of CPU (other processes took "
            f"{c.others_share or 0:.0%} of the machine)")
