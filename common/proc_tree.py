"""A process and its descendants, read from /proc (Linux, stdlib only).

A server such as vLLM runs its engine in child processes, so a figure of "the server" is a sum
over its tree. `ProcessTree.members()` walks the tree again at every call, so children started
late count, and a member whose parent ended (re-parented to init) stays a member while it
lives. A process is named by its PID and its start time, so a PID the kernel hands to a new,
unrelated process is never taken for the member that ended.

Each member's /proc/PID/stat is read at every walk (its parent, faults, CPU ticks); the other
processes' parents are read once, when their PID first appears, so a walk costs a listing of
/proc and a read per member, not a read per process on the host.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass

PROC = "/proc"


@dataclass(frozen=True, slots=True)
class ProcStat:
    """The figures of /proc/PID/stat that are read here (proc(5): fields 4, 10, 12, 14-17,
    22); faults and ticks are counts since the process started, its threads included."""

    pid: int
    ppid: int
    minor_faults: int
    major_faults: int
    user_ticks: int  # CPU time in clock ticks (os.sysconf("SC_CLK_TCK") a second)
    system_ticks: int
    children_ticks: int  # user + system of its children that ended and were waited for
    start_ticks: int  # when it started, in ticks after boot: with the PID, names the process


def parse_stat(pid: int, text: bytes) -> ProcStat:
    """/proc/PID/stat's line; the command name in parentheses may hold spaces and ')'."""
    fields = text[text.rindex(b")") + 2:].split()
    return ProcStat(pid=pid, ppid=int(fields[1]), minor_faults=int(fields[7]),
                    major_faults=int(fields[9]), user_ticks=int(fields[11]),
                    system_ticks=int(fields[12]),
                    children_ticks=int(fields[13]) + int(fields[14]), start_ticks=int(fields[19]))


def read_stat(pid: int) -> ProcStat | None:
    """None when the process is gone (or its stat cannot be read)."""
    try:
        with open(f"{PROC}/{pid}/stat", "rb") as f:
            return parse_stat(pid, f.read())
    except (OSError, ValueError, IndexError):
        return None


def read_text(path: str) -> str | None:
    """A /proc (or /sys) file's text; None where it is gone or may not be read."""
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def listed_pids() -> set[int]:
    return {int(name) for name in os.listdir(PROC) if name.isdigit()}


def ancestors(pid: int) -> set[int]:
    """The PIDs above `pid`, up to init."""
    out: set[int] = set()
    while (stat := read_stat(pid)) is not None and stat.ppid > 0 and stat.ppid not in out:
        out.add(stat.ppid)
        pid = stat.ppid
    return out


def matching(text: str) -> list[int]:
    """PIDs whose command line holds `text`, this process and its ancestors left out (the
    shell that started it holds the same text). A command line is read with its arguments
    joined by spaces; one that cannot be read (a process just gone, a hidden /proc) is
    skipped."""
    skip = {os.getpid(), *ancestors(os.getpid())}
    needle = text.encode()
    found = []
    for pid in sorted(listed_pids() - skip):
        try:
            with open(f"{PROC}/{pid}/cmdline", "rb") as f:
                cmdline = f.read().replace(b"\0", b" ")
        except OSError:
            continue
        if needle in cmdline:
            found.append(pid)
    return found


class ProcessTree:
    """The roots and every process descended from them, the reading process and its own
    children left out (an agent started by the server it watches does not count itself)."""

    def __init__(self, roots: Iterable[int]) -> None:
        self._members: dict[int, int] = {}  # pid -> start_ticks of the members last seen
        for pid in roots:
            if (stat := read_stat(pid)) is not None:
                self._members[pid] = stat.start_ticks
        self._parents: dict[int, int] = {}  # pid -> parent, of every process listed

    def members(self) -> tuple[dict[int, ProcStat], list[int]]:
        """(each living member's stat, the PIDs of members seen before that have ended)."""
        listed = listed_pids()
        for pid in self._parents.keys() - listed:
            del self._parents[pid]
        for pid in listed - self._parents.keys():
            if (stat := read_stat(pid)) is not None:
                self._parents[pid] = stat.ppid
        children: dict[int, list[int]] = {}
        for pid, ppid in self._parents.items():
            children.setdefault(ppid, []).append(pid)

        alive: dict[int, ProcStat] = {}
        queue = [pid for pid in self._members if pid in listed]
        reader = os.getpid()
        while queue:
            pid = queue.pop()
            if pid in alive or pid == reader or (stat := read_stat(pid)) is None:
                continue
            if self._members.get(pid) != stat.start_ticks and stat.ppid not in alive:
                continue  # not a member: a parent read earlier, or a member's PID reused
            self._parents[pid] = stat.ppid
            alive[pid] = stat
            queue.extend(children.get(pid, ()))
        ended = [pid for pid, start in self._members.items()
                 if pid not in alive or alive[pid].start_ticks != start]
        self._members = {pid: stat.start_ticks for pid, stat in alive.items()}
        return alive, ended
