"""What the tests share besides fixtures: the repository root, the fake server's fast knobs,
the CLI run as a user runs it, a wait for a port, and a process group's live members."""

from __future__ import annotations

import dataclasses
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from harness.config import RunConfig
from harness.mock_server import ThreadedMockServer
from harness.records import RequestRecord
from harness.results.run_row import RunRow
from harness.results.store import Store
from harness.run.session import RunResult

ROOT = Path(__file__).resolve().parent.parent
FAST = {"ttft_ms": 5, "itl_ms": 1}  # the knobs the `mock_server` fixture starts with


@dataclasses.dataclass
class SweepResult:
    """One `sweep`: the server it ran against, the store it wrote, the RunConfig it gave
    `execute` (execute's `result.config` has the served model and engine filled in)."""

    server: ThreadedMockServer
    store: Store
    config: RunConfig
    result: RunResult

    @property
    def run_id(self) -> str:
        return self.result.run_id

    @property
    def run(self) -> RunRow:
        """The stored run row, read now."""
        return self.store.run(self.run_id)

    @property
    def records(self) -> list[RequestRecord]:
        """The stored requests, read now."""
        return self.store.requests(self.run_id)


def wait_for_port(port: int, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listens on port {port}")


def run_cli(
    *args: str, timeout: float = 120, env: dict | None = None, cwd: Path = ROOT
) -> subprocess.CompletedProcess:
    """`python -m engram_bench ...` in a subprocess, as a user would run it."""
    return subprocess.run(
        [sys.executable, "-m", "engram_bench", *args],
        capture_output=True, text=True, timeout=timeout, cwd=cwd,
        env={**os.environ, **(env or {})},
    )


def group_alive(pgid: int) -> list[int]:
    """Live (not zombie) processes of a process group."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            pids.append(int(entry.name))
    return pids
