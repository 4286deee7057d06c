"""One scrape of a serving host's kernel counters as a typed sample.

The text is `engram-bench agent`'s /metrics (the names in common/host_metrics.py) or a
node_exporter's, whose names for the same kernel counters are read alike, so a site that runs
node_exporter needs no agent for the disk and host figures (it has no process tree and no
table residency: those are the agent's alone). Pure: text in, HostSample out; counters are
totals, read as the growth between two samples.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

from common import host_metrics as m

AGENT, NODE_EXPORTER = "engram-bench agent", "node_exporter"
NODE_TIME = "node_time_seconds"  # node_exporter's wall clock at the scrape (its time collector)

# DiskFigures' fields -> (the agent's name, node_exporter's), each labelled `device`
_DISK_NAMES = {
    "read_bytes": (m.DISK_READ_BYTES, "node_disk_read_bytes_total"),
    "reads_completed": (m.DISK_READS_COMPLETED, "node_disk_reads_completed_total"),
    "read_time_s": (m.DISK_READ_TIME, "node_disk_read_time_seconds_total"),
    "io_now": (m.DISK_IO_NOW, "node_disk_io_now"),
    "io_time_s": (m.DISK_IO_TIME, "node_disk_io_time_seconds_total"),
}
# SystemFigures' fields -> (the agent's name, node_exporter's)
_MEMINFO_FIELDS = {"Cached": "cached_bytes", "AnonHugePages": "anon_huge_pages_bytes",
                   "ShmemHugePages": "shmem_huge_pages_bytes", "MemTotal": "memory_total_bytes",
                   "MemAvailable": "memory_available_bytes"}
_PSI_NODE = {"some": "waiting", "full": "stalled"}  # node_exporter's words for PSI's lines
_SYSTEM_NAMES = {
    "pgmajfault": (m.VMSTAT_PGMAJFAULT, "node_vmstat_pgmajfault"),
    **{field: (m.MEMINFO[key], f"node_memory_{key}_bytes")
       for key, field in _MEMINFO_FIELDS.items()},
    **{f"{resource}_{kind}_s": (name, f"node_pressure_{resource}_{_PSI_NODE[kind]}"
                                      "_seconds_total")
       for (resource, kind), name in m.PRESSURE.items()},
}
_PROCESS_NAMES = {
    "alive": m.PROCESSES, "ended": m.PROCESSES_ENDED, "io_unreadable": m.PROCESS_IO_UNREADABLE,
    "minor_faults": m.PROCESS_MINOR_FAULTS, "major_faults": m.PROCESS_MAJOR_FAULTS,
    "read_bytes": m.PROCESS_READ_BYTES, "rss_anon_bytes": m.PROCESS_RSS_ANON,
    "rss_file_bytes": m.PROCESS_RSS_FILE, "rss_shmem_bytes": m.PROCESS_RSS_SHMEM,
    "locked_bytes": m.PROCESS_LOCKED, "pinned_bytes": m.PROCESS_PINNED,
}


class NotHostMetrics(ValueError):
    """The text is not Prometheus text, or holds neither the agent's names nor a
    node_exporter's; the message says which."""


@dataclass(frozen=True, slots=True)
class ProcessFigures:
    """The serving process tree (the agent only); read_bytes None: no member's
    /proc/PID/io was readable."""

    alive: float
    ended: float
    io_unreadable: float
    minor_faults: float
    major_faults: float
    read_bytes: float | None
    rss_anon_bytes: float
    rss_file_bytes: float
    rss_shmem_bytes: float
    locked_bytes: float
    pinned_bytes: float


@dataclass(frozen=True, slots=True)
class TableFileFigures:
    """One table file (the agent only); resident_bytes None: the file could not be opened
    at that scrape."""

    path: str
    size_bytes: float
    device: str | None  # the disk that holds it, None where no block device does
    resident_bytes: float | None
    sampled_fraction: float | None  # 1: exact; below 1, resident_bytes is scaled


@dataclass(frozen=True, slots=True)
class DiskFigures:
    device: str
    read_bytes: float | None
    reads_completed: float | None
    read_time_s: float | None
    io_now: float | None
    io_time_s: float | None


@dataclass(frozen=True, slots=True)
class SystemFigures:
    """The host's; a figure its source lacks (PSI on an old kernel) is None."""

    pgmajfault: float | None = None
    cached_bytes: float | None = None
    anon_huge_pages_bytes: float | None = None
    shmem_huge_pages_bytes: float | None = None
    memory_total_bytes: float | None = None
    memory_available_bytes: float | None = None
    io_some_s: float | None = None
    io_full_s: float | None = None
    memory_some_s: float | None = None
    memory_full_s: float | None = None


@dataclass(frozen=True, slots=True)
class HostSample:
    source: str  # AGENT or NODE_EXPORTER
    wall_s: float | None  # the host's wall clock at the scrape (node_exporter's: None
    # without its time collector)
    monotonic_s: float | None  # the agent host's monotonic clock at the scrape
    residency: str | None  # how the agent read residency: cachestat or mincore
    processes: ProcessFigures | None
    tables: tuple[TableFileFigures, ...]
    disks: Mapping[str, DiskFigures]  # by device name
    system: SystemFigures


_Series = dict[str, list[tuple[dict[str, str], float, float | None]]]  # name -> samples


def parse_host_sample(text: str) -> HostSample:
    """One scrape's text -> its sample; NotHostMetrics when it is none."""
    series = _series(text)
    if any(name.startswith(m.PREFIX) for name in series):
        source = AGENT
    elif any(name.startswith("node_") for name in series):
        source = NODE_EXPORTER
    else:
        raise NotHostMetrics("neither engram-bench agent's figures (engram_host_*) nor a "
                             "node_exporter's (node_*) are in it")
    info = series.get(m.AGENT_INFO, [])
    stamps = [stamp for samples in series.values() for _, _, stamp in samples
              if stamp is not None]
    return HostSample(
        source=source,
        wall_s=_first(series, (m.CLOCK_WALL, NODE_TIME)) or max(stamps, default=None),
        monotonic_s=_value(series, m.CLOCK_MONOTONIC),
        residency=info[0][0].get(m.RESIDENCY) if info else None,
        processes=_processes(series), tables=_tables(series), disks=_disks(series),
        system=SystemFigures(**{field: _first(series, names)
                                for field, names in _SYSTEM_NAMES.items()}))


def _series(text: str) -> _Series:
    out: _Series = {}
    try:
        for family in text_string_to_metric_families(text):
            for s in family.samples:
                if math.isfinite(s.value):
                    stamp = None if s.timestamp is None else float(s.timestamp)
                    out.setdefault(s.name, []).append((s.labels, float(s.value), stamp))
    except (ValueError, IndexError, KeyError, TypeError) as exc:  # the parser's
        raise NotHostMetrics(f"not Prometheus text: {exc or type(exc).__name__}") from None
    return out


def _value(series: _Series, name: str, labels: Mapping[str, str] | None = None,
           default: float | None = None) -> float | None:
    """The value of the series `name` whose labels hold `labels` (the first one)."""
    for have, value, _ in series.get(name, ()):
        if labels is None or all(have.get(k) == v for k, v in labels.items()):
            return value
    return default


def _first(series: _Series, names: tuple[str, ...],
           labels: Mapping[str, str] | None = None) -> float | None:
    """The first of `names` (the agent's, then node_exporter's) that the scrape holds."""
    for name in names:
        if (value := _value(series, name, labels)) is not None:
            return value
    return None


def _processes(series: _Series) -> ProcessFigures | None:
    values = {field: _value(series, name) for field, name in _PROCESS_NAMES.items()}
    if values["alive"] is None:
        return None
    read_bytes = values.pop("read_bytes")
    return ProcessFigures(read_bytes=read_bytes, **{k: v or 0.0 for k, v in values.items()})


def _tables(series: _Series) -> tuple[TableFileFigures, ...]:
    out = []
    for labels, size, _ in series.get(m.TABLE_FILE_BYTES, ()):
        path = labels.get(m.PATH, "")
        out.append(TableFileFigures(
            path=path, size_bytes=size, device=labels.get(m.DEVICE) or None,
            resident_bytes=_value(series, m.TABLE_RESIDENT_BYTES, {m.PATH: path}),
            sampled_fraction=_value(series, m.TABLE_SAMPLED_FRACTION, {m.PATH: path})))
    return tuple(out)


def _disks(series: _Series) -> dict[str, DiskFigures]:
    devices = {labels[m.DEVICE] for names in _DISK_NAMES.values() for name in names
               for labels, _, _ in series.get(name, ()) if labels.get(m.DEVICE)}
    return {device: DiskFigures(device=device, **{
        field: _first(series, names, {m.DEVICE: device})
        for field, names in _DISK_NAMES.items()}) for device in sorted(devices)}
