"""The host's own figures: major faults of every process, the page cache and huge pages, and
the I/O and memory pressure stall (PSI). A source the kernel lacks (PSI before 4.20, or
disabled) is absent from the sample, never 0."""

from __future__ import annotations

from dataclasses import dataclass, field

from common import proc_tree
from common.host_metrics import MEMINFO

VMSTAT = "/proc/vmstat"
MEMINFO_PATH = "/proc/meminfo"
PRESSURE_DIR = "/proc/pressure"
PSI_RESOURCES = ("io", "memory")
KIB = 1024
US_PER_S = 1e6


@dataclass(frozen=True, slots=True)
class SystemSample:
    pgmajfault: int | None
    memory: dict[str, int] = field(default_factory=dict)  # MEMINFO's keys -> bytes
    pressure: dict[tuple[str, str], float] = field(default_factory=dict)  # (io, some) -> s


def parse_vmstat_pgmajfault(text: str) -> int | None:
    for line in text.splitlines():
        if line.startswith("pgmajfault "):
            return int(line.split()[1])
    return None


def parse_meminfo(text: str) -> dict[str, int]:
    """The lines MEMINFO names ("Cached:  2425612 kB") -> bytes."""
    out = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in MEMINFO:
            out[key] = int(rest.split()[0]) * KIB
    return out


def parse_pressure(text: str) -> dict[str, float]:
    """/proc/pressure/RESOURCE ("some avg10=0.00 avg60=0.18 avg300=0.23 total=1706814") ->
    {"some": seconds, "full": seconds}, from the cumulative `total` (microseconds)."""
    out = {}
    for line in text.splitlines():
        kind, *fields = line.split()
        for item in fields:
            name, _, value = item.partition("=")
            if name == "total":
                out[kind] = int(value) / US_PER_S
    return out


def sample() -> SystemSample:
    vmstat, meminfo = proc_tree.read_text(VMSTAT), proc_tree.read_text(MEMINFO_PATH)
    pressure = {}
    for resource in PSI_RESOURCES:
        if (text := proc_tree.read_text(f"{PRESSURE_DIR}/{resource}")) is not None:
            for kind, seconds in parse_pressure(text).items():
                pressure[(resource, kind)] = seconds
    return SystemSample(
        pgmajfault=parse_vmstat_pgmajfault(vmstat) if vmstat is not None else None,
        memory=parse_meminfo(meminfo) if meminfo is not None else {}, pressure=pressure)
