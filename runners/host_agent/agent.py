"""The agent put together from its flags: the process tree's roots, the checked table paths,
how residency is read, and the server; each input a user can get wrong is one sentence."""

from __future__ import annotations

import functools
import os
import sys
import threading
from dataclasses import dataclass

from prometheus_client import CollectorRegistry

from common.proc_tree import matching, read_stat
from runners.host_agent import residency, table_state, tables
from runners.host_agent.collector import HostCollector
from runners.host_agent.processes import TreeReader
from runners.host_agent.server import MetricsServer

AUTO = "auto"
DEFAULT_PORT = 9477


class AgentError(ValueError):
    """An input the agent refuses; one sentence for the user."""


@dataclass(frozen=True, slots=True)
class AgentConfig:
    pid: int | None
    match: str | None
    tables: list[str]
    residency: str  # AUTO or one of residency.METHODS
    host: str
    port: int


def roots(pid: int | None, match: str | None) -> list[int]:
    """The process tree's roots: --pid, or every process whose command line holds --match."""
    if pid is not None:
        if read_stat(pid) is None:
            raise AgentError(f"no process with PID {pid} on this host")
        return [pid]
    if not match:
        raise AgentError("name the serving process: --pid PID or --match TEXT")
    if not (found := matching(match)):
        raise AgentError(f"no process's command line holds {match!r}")
    return found


def residency_method(choice: str, table_paths: list[str]) -> str:
    """cachestat where the kernel answers it for the first table file, else mincore."""
    if choice != AUTO:
        return choice
    files = [f for path in table_paths
             for f in (tables.list_files(path) if os.path.isdir(path) else [path])]
    probe = files[0] if files else sys.executable
    return residency.CACHESTAT if residency.has_cachestat(probe) else residency.MINCORE


class Agent:
    def __init__(self, config: AgentConfig) -> None:
        self.roots = roots(config.pid, config.match)
        paths = [tables.check(text) for text in config.tables]
        self.method = residency_method(config.residency, paths)
        self.tree = TreeReader(self.roots)
        self.tables = tables.Tables(paths, self.method)
        registry = CollectorRegistry(auto_describe=False)
        registry.register(HostCollector(self.tree, self.tables))
        self.server = MetricsServer(registry, config.host, config.port, self.control)
        self._state_lock = threading.Lock()  # one drop or warm at a time

    def control(self, path: str, query: dict[str, list[str]]) -> tuple[int, dict[str, object]]:
        """POST /table/drop or /table/warm[?budget_bytes=N] on the --table files: (HTTP
        status, JSON answer); 409 for an agent given no table, 400 for a bad budget."""
        if path not in ("/table/drop", "/table/warm"):
            return 404, {"error": f"no such action: {path}"}
        if not self.tables.paths:
            return 409, {"error": "the agent was started without --table, so it has no table "
                                  "files to drop or warm"}
        budget: int | None = None
        if path == "/table/warm" and (given := query.get("budget_bytes")):
            if not given[0].isdigit():
                return 400, {"error": f"budget_bytes must be a whole number, not {given[0]!r}"}
            budget = int(given[0])
        with self._state_lock:
            exact = functools.partial(self.tables.sample, whole=True)
            result = (table_state.drop(exact) if path == "/table/drop"
                      else table_state.warm(exact, budget))
        return 200, result.to_json()

    def banner(self) -> list[str]:
        """What is served and watched, a line, then a warning line for each figure that
        will be short."""
        tree, files = self.tree.sample(), self.tables.sample()
        pids = ", ".join(map(str, self.roots[:5])) + (" ..." if len(self.roots) > 5 else "")
        disks = sorted({f.device for f in files if f.device is not None})
        lines = [f"engram-bench agent: serving {self.server.url}: {tree.alive} "
                 f"process{'' if tree.alive == 1 else 'es'} "
                 f"(PID {pids} and their children), {len(files)} table files"
                 + (f" on {', '.join(disks)}" if disks else "")
                 + f", residency by {self.method}"]
        if nowhere := [f.path for f in files if f.device is None]:
            lines.append(f"note: no block device holds {nowhere[0]}"
                         + (f" and {len(nowhere) - 1} more" if len(nowhere) > 1 else "")
                         + " (tmpfs, overlay, NFS or btrfs): no disk figures for it")
        if tree.io_unreadable:
            lines.append(f"warning: /proc/PID/io of {tree.io_unreadable} of the processes "
                         "is another user's: bytes read leave them out (run the agent as "
                         "that user or as root)")
        return lines
