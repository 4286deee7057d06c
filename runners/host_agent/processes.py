"""The serving process tree's figures, summed over its members: faults and bytes read from
storage (counters), resident and locked memory (gauges).

Counters stay counters while members come and go: a member that ends leaves the totals with
what it had counted when last seen (what it counted after that last sample is lost with it),
so a total never falls. Memory is summed over the living members: a page that two members
map counts twice, as each process's own RssFile counts it.
"""

from __future__ import annotations

from dataclasses import dataclass

from common import proc_tree
from common.proc_tree import PROC, ProcessTree, ProcStat

KIB = 1024
STATUS_FIELDS = {"RssAnon": "rss_anon", "RssFile": "rss_file", "RssShmem": "rss_shmem",
                 "VmLck": "locked", "VmPin": "pinned"}


@dataclass(frozen=True, slots=True)
class Counts:
    """A member's counters, as last read."""

    minor_faults: int
    major_faults: int
    read_bytes: int | None  # None: /proc/PID/io unreadable (another user's process)


@dataclass(frozen=True, slots=True)
class TreeSample:
    alive: int  # members living now
    ended: int  # members that ended since the agent started
    io_unreadable: int  # living members whose /proc/PID/io could not be read
    minor_faults: int
    major_faults: int
    read_bytes: int | None  # None: no member's /proc/PID/io was ever readable
    memory: dict[str, int]  # STATUS_FIELDS' names -> bytes, summed over living members


def parse_status(text: str) -> dict[str, int]:
    """/proc/PID/status' memory lines ("RssFile:   1636 kB") -> bytes by STATUS_FIELDS name;
    a line the kernel does not write (a kernel thread's) is 0."""
    out = dict.fromkeys(STATUS_FIELDS.values(), 0)
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in STATUS_FIELDS:
            out[STATUS_FIELDS[key]] = int(rest.split()[0]) * KIB
    return out


def parse_read_bytes(text: str) -> int | None:
    for line in text.splitlines():
        if line.startswith("read_bytes:"):
            return int(line.split()[1])
    return None


class TreeReader:
    """One process tree's sums, sample after sample."""

    def __init__(self, roots: list[int]) -> None:
        self.tree = ProcessTree(roots)
        self._last: dict[int, Counts] = {}  # the living members' counters, as last read
        self._retired = Counts(0, 0, None)  # the ended members' counters, summed
        self._ended = 0

    def sample(self) -> TreeSample:
        alive, ended = self.tree.members()
        for pid in ended:
            if (gone := self._last.pop(pid, None)) is not None:
                self._retired = _add(self._retired, gone)
                self._ended += 1
        memory = dict.fromkeys(STATUS_FIELDS.values(), 0)
        total = self._retired
        unreadable = 0
        for pid, stat in alive.items():
            counts, readable = self._counts(stat)
            unreadable += not readable
            self._last[pid] = counts
            total = _add(total, counts)
            if (status := proc_tree.read_text(f"{PROC}/{pid}/status")) is not None:
                for name, value in parse_status(status).items():
                    memory[name] += value
        return TreeSample(alive=len(alive), ended=self._ended, io_unreadable=unreadable,
                          minor_faults=total.minor_faults, major_faults=total.major_faults,
                          read_bytes=total.read_bytes, memory=memory)

    def _counts(self, stat: ProcStat) -> tuple[Counts, bool]:
        """(the member's counters, whether its /proc/PID/io was read now); an io file that
        fails once keeps its last figure, so the total does not fall."""
        io = proc_tree.read_text(f"{PROC}/{stat.pid}/io")
        read_bytes = parse_read_bytes(io) if io is not None else None
        readable = read_bytes is not None
        if not readable and (last := self._last.get(stat.pid)) is not None:
            read_bytes = last.read_bytes
        return Counts(stat.minor_faults, stat.major_faults, read_bytes), readable


def _add(a: Counts, b: Counts) -> Counts:
    read = None if a.read_bytes is None and b.read_bytes is None else \
        (a.read_bytes or 0) + (b.read_bytes or 0)
    return Counts(a.minor_faults + b.minor_faults, a.major_faults + b.major_faults, read)
