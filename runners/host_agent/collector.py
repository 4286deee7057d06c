"""The agent's figures as Prometheus metric families, read from the kernel at each scrape (a
custom collector: nothing is sampled between scrapes, so a scrape's figures are the kernel's
at that moment, each stamped with the agent's wall clock in ms)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from common import host_metrics as m
from runners.host_agent import block_devices, system
from runners.host_agent.processes import TreeReader, TreeSample
from runners.host_agent.tables import TableFile, Tables

_MEMORY = {"rss_anon": m.PROCESS_RSS_ANON, "rss_file": m.PROCESS_RSS_FILE,
           "rss_shmem": m.PROCESS_RSS_SHMEM, "locked": m.PROCESS_LOCKED,
           "pinned": m.PROCESS_PINNED}


def _gauge(name: str, doc: str, value: float, at: float) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, doc)
    family.add_metric([], value, timestamp=at)
    return family


def _counter(name: str, doc: str, value: float, at: float) -> CounterMetricFamily:
    family = CounterMetricFamily(name, doc)
    family.add_metric([], value, timestamp=at)
    return family


class HostCollector(Collector):
    """One process tree, its table files, their disks and the host; scrapes run one at a
    time (the tree's totals carry state from one to the next)."""

    def __init__(self, tree: TreeReader, tables: Tables) -> None:
        self.tree = tree
        self.tables = tables
        self._lock = threading.Lock()

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            began = time.perf_counter()
            families = [*self._clock(), *self._processes(self.tree.sample())]
            files = self.tables.sample()
            families += self._tables(files)
            families += self._disks({f.device for f in files if f.device is not None})
            families += self._system(system.sample())
            families.append(_gauge(m.COLLECT_SECONDS, "Wall time this scrape's reads took",
                                   time.perf_counter() - began, time.time()))
        return iter(families)

    def _clock(self) -> list[Metric]:
        monotonic, wall = time.monotonic(), time.time()
        info = GaugeMetricFamily(m.AGENT_INFO, "How the agent reads", labels=[m.RESIDENCY])
        info.add_metric([self.tables.method], 1, timestamp=wall)
        return [info,
                _gauge(m.CLOCK_MONOTONIC, "The agent host's monotonic clock", monotonic, wall),
                _gauge(m.CLOCK_WALL, "The agent host's wall clock", wall, wall)]

    @staticmethod
    def _processes(s: TreeSample) -> list[Metric]:
        at = time.time()
        out: list[Metric] = [
            _gauge(m.PROCESSES, "Members of the process tree alive now", s.alive, at),
            _counter(m.PROCESSES_ENDED, "Members that ended since the agent started",
                     s.ended, at),
            _gauge(m.PROCESS_IO_UNREADABLE, "Living members whose /proc/PID/io is unreadable",
                   s.io_unreadable, at),
            _counter(m.PROCESS_MINOR_FAULTS, "Minor faults of the tree", s.minor_faults, at),
            _counter(m.PROCESS_MAJOR_FAULTS, "Major faults of the tree", s.major_faults, at)]
        if s.read_bytes is not None:
            out.append(_counter(m.PROCESS_READ_BYTES, "Bytes the tree read from storage",
                                s.read_bytes, at))
        out += [_gauge(name, f"{key} of the living members, summed", s.memory[key], at)
                for key, name in _MEMORY.items()]
        return out

    @staticmethod
    def _tables(files: list[TableFile]) -> list[Metric]:
        at = time.time()
        size = GaugeMetricFamily(m.TABLE_FILE_BYTES, "Table file size",
                                 labels=[m.PATH, m.DEVICE])
        resident = GaugeMetricFamily(m.TABLE_RESIDENT_BYTES, "Table bytes in the page cache",
                                     labels=[m.PATH])
        fraction = GaugeMetricFamily(m.TABLE_SAMPLED_FRACTION,
                                     "Share of the file's pages asked about", labels=[m.PATH])
        for f in files:
            size.add_metric([f.path, f.device or ""], f.size, timestamp=at)
            if f.residency is not None:
                resident.add_metric([f.path], f.residency.resident_bytes, timestamp=at)
                fraction.add_metric([f.path], f.residency.sampled_fraction, timestamp=at)
        return [size, resident, fraction]

    @staticmethod
    def _disks(disks: set[str]) -> list[Metric]:
        stats = block_devices.read_diskstats()
        at = time.time()
        families: dict[str, CounterMetricFamily | GaugeMetricFamily] = {
            "read_bytes": CounterMetricFamily(m.DISK_READ_BYTES, "Bytes read",
                                              labels=[m.DEVICE]),
            "reads_completed": CounterMetricFamily(m.DISK_READS_COMPLETED, "Reads completed",
                                                   labels=[m.DEVICE]),
            "read_time_s": CounterMetricFamily(m.DISK_READ_TIME, "Time reads spent in flight",
                                               labels=[m.DEVICE]),
            "io_now": GaugeMetricFamily(m.DISK_IO_NOW, "I/Os in flight now",
                                        labels=[m.DEVICE]),
            "io_time_s": CounterMetricFamily(m.DISK_IO_TIME, "Time with any I/O in flight",
                                             labels=[m.DEVICE])}
        for disk in sorted(disks & stats.keys()):
            for field, family in families.items():
                family.add_metric([disk], getattr(stats[disk], field), timestamp=at)
        return list(families.values())

    @staticmethod
    def _system(s: system.SystemSample) -> list[Metric]:
        at = time.time()
        out: list[Metric] = []
        if s.pgmajfault is not None:
            out.append(_counter(m.VMSTAT_PGMAJFAULT, "Major faults on the host",
                                s.pgmajfault, at))
        out += [_gauge(m.MEMINFO[key], f"/proc/meminfo {key}", value, at)
                for key, value in s.memory.items()]
        out += [_counter(m.PRESSURE[key], f"PSI {key[0]} {key[1]} stall", seconds, at)
                for key, seconds in s.pressure.items() if key in m.PRESSURE]
        return out
