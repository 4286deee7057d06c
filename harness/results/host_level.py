"""One pass of a level on one serving host, from the scrapes of its agent (or node_exporter)
taken as the level began, every SLICE_S while it ran and as it ended: what the host's kernel
counted over the level (counters' growth, gauges' peaks, the table's residency at each end)
and the slices between successive scrapes, placed on the harness's clock.

The agent's clocks are mapped to ours as `run --ray` maps a load host's
(harness.results.clock_offset): each scrape is a round trip that read the agent's monotonic
and wall clocks, so a sample's time on our clock is the agent's monotonic clock less the
offset of the shortest round trip, kept within the scrape's own round trip. A node_exporter
serves no monotonic clock: its samples are placed at the middle of their round trip.

A level's figures are missing, with the reason, when a scrape at either end failed, or when
the watched process tree had ended (the agent serves `engram_host_processes` 0 then): the
run goes on. Pure: scrapes in, figures out.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields

from harness.results.clock_offset import ClockOffset, ClockReading
from harness.results.host_sample import HostSample, ProcessFigures

SLICE_S = 1.0  # how often a host is scraped while a level runs: the time slices' width
_NS = 1e9


@dataclass(frozen=True, slots=True)
class Scrape:
    """One GET of a host's metrics: our monotonic clock (ns) and wall clock (ns) as it was
    sent, our monotonic clock as its answer came, and what it gave: a sample, or the
    sentence why not."""

    sent_ns: int
    received_ns: int
    sent_wall_ns: int
    sample: HostSample | None
    error: str | None = None

    def reading(self) -> ClockReading | None:
        """The round trip as a clock reading; None without the agent's two clocks."""
        s = self.sample
        if s is None or s.monotonic_s is None or s.wall_s is None:
            return None
        return ClockReading(self.sent_ns, self.received_ns, self.sent_wall_ns,
                            round(s.wall_s * _NS), round(s.monotonic_s * _NS))

    def at_ns(self, offset: ClockOffset | None) -> int:
        """When the host read its kernel, on our monotonic clock: the agent's monotonic clock
        mapped by `offset`, within this round trip; else the round trip's middle."""
        s = self.sample
        if offset is None or s is None or s.monotonic_s is None:
            return (self.sent_ns + self.received_ns) // 2
        mapped = round(s.monotonic_s * _NS) - offset.monotonic_ns
        return min(max(mapped, self.sent_ns), self.received_ns)

    def wall_at(self, at_ns: int) -> float:
        """Our wall clock (epoch seconds) at our monotonic `at_ns`."""
        return (self.sent_wall_ns + at_ns - self.sent_ns) / _NS


@dataclass(frozen=True, slots=True)
class HostLevel:
    """One host over one pass of a level (a `host_levels` row). Counters are growths over the
    level, peaks the highest scraped value, residency summed over the table files; None
    where the source has no such figure or `missing` says why it is lost."""

    node: int  # the URL's place in --host-metrics (0-based)
    url: str
    source: str | None  # harness.results.host_sample.AGENT or NODE_EXPORTER
    missing: str | None  # why the level's figures are missing; None: all the source has
    scrapes: int  # scrapes answered over the level
    wall_s: float | None  # the level's span between its first and last scrape (host clock)
    clock_offset_ms: float | None  # the agent's wall clock minus ours
    round_trip_ms: float | None  # ... at the shortest round trip so far: its error's bound x2
    read_bytes: float | None  # the process tree's /proc/PID/io read_bytes growth
    major_faults: float | None
    minor_faults: float | None
    processes_ended: float | None  # members of the tree that ended during the level
    table_bytes: float | None
    table_resident_start_bytes: float | None
    table_resident_end_bytes: float | None
    table_sampled_fraction: float | None  # the least share of pages asked about: 1 = exact
    peak_rss_file_bytes: float | None
    peak_rss_shmem_bytes: float | None
    peak_locked_bytes: float | None
    peak_pinned_bytes: float | None
    io_some_s: float | None  # PSI io: time some task stalled on I/O
    io_full_s: float | None
    memory_some_s: float | None
    host_major_faults: float | None  # /proc/vmstat pgmajfault: every process on the host
    disk: str | None  # the disk busiest over the level (the agent's: under a table file)
    disk_read_bytes: float | None  # ... bytes read from it, by every process
    disk_reads: float | None
    disk_io_time_s: float | None  # ... time it had I/O in flight


@dataclass(frozen=True, slots=True)
class HostSlice:
    """The span between two successive scrapes of a level (a `host_slices` row): growths over
    it, and gauges at its end."""

    node: int
    start_s: float  # after the level's first scrape was sent, on the harness's clock
    width_s: float
    started_at: float  # the harness's wall clock at its start, epoch seconds
    read_bytes: float | None
    major_faults: float | None
    table_resident_bytes: float | None
    rss_file_bytes: float | None
    io_some_s: float | None
    disk_io_time_s: float | None
    disk_read_bytes: float | None


HostPass = tuple[HostLevel, list[HostSlice]]  # one host over a pass of a level


def _growth(first: float | None, last: float | None) -> float | None:
    """A counter's growth; None where either end lacks it or it went back (a restart)."""
    if first is None or last is None or last < first:
        return None
    return last - first


def resident_table_bytes(sample: HostSample) -> float | None:
    """The table files' resident bytes summed; None without files or with one unread."""
    values = [t.resident_bytes for t in sample.tables]
    if not values or any(v is None for v in values):
        return None
    return sum(v for v in values if v is not None)


def _peak(samples: Sequence[HostSample], read: Callable[[ProcessFigures], float]) -> float | None:
    figures = [s.processes for s in samples]
    if not figures or any(f is None for f in figures):
        return None
    return max(read(f) for f in figures if f is not None)


def _busiest_disk(first: HostSample, last: HostSample) -> str | None:
    both = first.disks.keys() & last.disks.keys()
    if not both:
        return None
    return max(sorted(both), key=lambda d: _growth(first.disks[d].io_time_s,
                                                  last.disks[d].io_time_s) or 0.0)


def _process_missing(first: ProcessFigures, last: ProcessFigures) -> str | None:
    if first.alive == 0:
        return "the process tree the agent watches had ended before the level began"
    if last.alive == 0:
        ended = _growth(first.ended, last.ended)
        return ("the process tree the agent watches ended during the level"
                + (f" ({ended:.0f} of its processes ended)" if ended else ""))
    if _growth(first.major_faults, last.major_faults) is None:
        return "the agent's counters went back during the level (it was started again)"
    return None


def host_level(node: int, url: str, scrapes: Sequence[Scrape],
               offset: ClockOffset | None) -> tuple[HostLevel, list[HostSlice]]:
    """One host's figures over a pass of a level, from its scrapes in order (the first as the
    level began, the last as it ended), and the slices between them; `offset`: the best
    clock offset known for this host (None: a node_exporter, or no answer yet)."""
    answered = [s for s in scrapes if s.sample is not None]
    first, last = (scrapes[0], scrapes[-1]) if scrapes else (None, None)
    missing = None
    if first is None or first.sample is None:
        missing = f"{url} did not answer as the level began ({_why(first)})"
    elif last is None or last.sample is None:
        missing = f"{url} did not answer as the level ended ({_why(last)})"
    elif first.sample.source != last.sample.source:
        missing = f"{url} answered as {first.sample.source}, then as {last.sample.source}"
    clock = {"clock_offset_ms": offset.wall_ns / 1e6 if offset else None,
             "round_trip_ms": offset.round_trip_ns / 1e6 if offset else None}
    if missing is not None or first is None or last is None:
        return (_empty(node, url, answered, missing, clock),
                _slices(node, scrapes, offset, None))
    a, b = first.sample, last.sample
    assert a is not None and b is not None
    disk = _busiest_disk(a, b)
    processes = _processes(a, b, [s.sample for s in answered if s.sample is not None])
    missing = processes.pop("missing")
    wall = (b.monotonic_s - a.monotonic_s if a.monotonic_s is not None
            and b.monotonic_s is not None else (last.at_ns(None) - first.at_ns(None)) / _NS)
    level = HostLevel(
        node=node, url=url, source=a.source, missing=missing, scrapes=len(answered),
        wall_s=wall, **clock, **processes,
        table_bytes=sum(t.size_bytes for t in b.tables) if b.tables else None,
        table_resident_start_bytes=resident_table_bytes(a),
        table_resident_end_bytes=resident_table_bytes(b),
        table_sampled_fraction=min((t.sampled_fraction for s in (a, b) for t in s.tables
                                    if t.sampled_fraction is not None), default=None),
        io_some_s=_growth(a.system.io_some_s, b.system.io_some_s),
        io_full_s=_growth(a.system.io_full_s, b.system.io_full_s),
        memory_some_s=_growth(a.system.memory_some_s, b.system.memory_some_s),
        host_major_faults=_growth(a.system.pgmajfault, b.system.pgmajfault),
        disk=disk,
        disk_read_bytes=_growth(a.disks[disk].read_bytes, b.disks[disk].read_bytes)
        if disk else None,
        disk_reads=_growth(a.disks[disk].reads_completed, b.disks[disk].reads_completed)
        if disk else None,
        disk_io_time_s=_growth(a.disks[disk].io_time_s, b.disks[disk].io_time_s)
        if disk else None)
    return level, _slices(node, scrapes, offset, disk)


def _processes(a: HostSample, b: HostSample, samples: list[HostSample]) -> dict:
    """The process tree's fields of a HostLevel, and `missing`: why they are lost."""
    keys = ("read_bytes", "major_faults", "minor_faults", "processes_ended",
            "peak_rss_file_bytes", "peak_rss_shmem_bytes", "peak_locked_bytes",
            "peak_pinned_bytes")
    empty: dict = {key: None for key in keys}
    if a.processes is None or b.processes is None:  # a node_exporter: none to lose
        return {**empty, "missing": None}
    p, q = a.processes, b.processes
    if (why := _process_missing(p, q)) is not None:
        return {**empty, "missing": why}
    return {"missing": None, "read_bytes": _growth(p.read_bytes, q.read_bytes),
            "major_faults": _growth(p.major_faults, q.major_faults),
            "minor_faults": _growth(p.minor_faults, q.minor_faults),
            "processes_ended": _growth(p.ended, q.ended),
            "peak_rss_file_bytes": _peak(samples, lambda f: f.rss_file_bytes),
            "peak_rss_shmem_bytes": _peak(samples, lambda f: f.rss_shmem_bytes),
            "peak_locked_bytes": _peak(samples, lambda f: f.locked_bytes),
            "peak_pinned_bytes": _peak(samples, lambda f: f.pinned_bytes)}


def _why(scrape: Scrape | None) -> str:
    return scrape.error if scrape is not None and scrape.error else "not scraped"


_SET = ("node", "url", "source", "missing", "scrapes", "clock_offset_ms", "round_trip_ms")


def _empty(node: int, url: str, answered: list[Scrape], missing: str | None,
           clock: dict) -> HostLevel:
    """A level whose figures are all lost, `missing` saying why."""
    source = next((s.sample.source for s in answered if s.sample is not None), None)
    return HostLevel(node=node, url=url, source=source, missing=missing, scrapes=len(answered),
                     **clock, **{f.name: None for f in fields(HostLevel) if f.name not in _SET})


def _slices(node: int, scrapes: Sequence[Scrape], offset: ClockOffset | None,
            disk: str | None) -> list[HostSlice]:
    """The spans between successive answered scrapes, timed from the level's first send."""
    if not scrapes:
        return []
    origin = scrapes[0].sent_ns
    answered = [s for s in scrapes if s.sample is not None]
    out = []
    for x, y in itertools.pairwise(answered):
        a, b = x.sample, y.sample
        assert a is not None and b is not None
        start, end = x.at_ns(offset), y.at_ns(offset)
        pa, pb = a.processes, b.processes
        if pa is None or pb is None or pb.alive == 0:  # no tree, or it had ended
            pa = pb = None
        da, db = (a.disks.get(disk), b.disks.get(disk)) if disk else (None, None)
        out.append(HostSlice(
            node=node, start_s=(start - origin) / _NS, width_s=(end - start) / _NS,
            started_at=x.wall_at(start),
            read_bytes=_growth(pa.read_bytes, pb.read_bytes) if pa and pb else None,
            major_faults=_growth(pa.major_faults, pb.major_faults) if pa and pb else None,
            table_resident_bytes=resident_table_bytes(b),
            rss_file_bytes=pb.rss_file_bytes if pb else None,
            io_some_s=_growth(a.system.io_some_s, b.system.io_some_s),
            disk_io_time_s=_growth(da.io_time_s, db.io_time_s) if da and db else None,
            disk_read_bytes=_growth(da.read_bytes, db.read_bytes) if da and db else None))
    return out
