"""What the tests share besides fixtures: the repository root, the fake server's fast knobs,
the CLI run as a user runs it, waits for a port and for a run's rows, and the live processes
that /proc shows."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TypeVar

import pytest

from harness.config import RunConfig
from harness.mock_server import ThreadedMockServer
from harness.records import RequestRecord
from harness.results.run_row import RunRow
from harness.results.store import Store
from harness.run.session import RunResult

ROOT = Path(__file__).resolve().parent.parent
T = TypeVar("T")
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


def stored_rows(db: Path) -> int:
    """The requests stored so far of the first run in results file `db` (0 before it has
    one)."""
    if not db.exists():
        return 0
    store = Store(db)
    runs = store.runs()
    return len(store.requests(runs[0].run_id)) if runs else 0


def wait_while_running(condition: Callable[[], object], proc: subprocess.Popen, what: str,
                       timeout_s: float = 60, poll_s: float = 0.05) -> None:
    """Wait until `condition()` holds while `proc` goes on running: a process that ends
    first fails the test with its whole output and the end of each log it names (a server's,
    whose crash would explain it), a condition that never holds with `what`."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if proc.poll() is not None:
            out, err = proc.communicate()
            pytest.fail(f"the process ended with exit {proc.returncode} before {what}:\n"
                        f"{out}{err}{_named_logs(out + err)}", pytrace=False)
        assert time.monotonic() < deadline, f"{what} did not happen"
        time.sleep(poll_s)


def _named_logs(output: str, lines: int = 40) -> str:
    """The last `lines` of each log file that `output` names as `(log: PATH)` or `(log PATH)`
    (a relative path from the repository root, as the CLI prints them)."""
    tails = []
    for name in dict.fromkeys(re.findall(r"\(log:? ([^)\s]+)\)", output)):
        path = ROOT / name
        if path.is_file():
            tail = path.read_text(errors="replace").splitlines()[-lines:]
            tails.append(f"\n--- the end of {name} ---\n" + "\n".join(tail))
    return "".join(tails)


def processes(read: Callable[[Path], T]) -> dict[int, T]:
    """`read` of each process's /proc folder, by pid; a process gone (or not ours to read)
    while it is read is left out."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                found[int(entry.name)] = read(entry)
            except OSError:
                continue
    return found


def group_alive(pgid: int) -> list[int]:
    """Live (not zombie) processes of a process group."""
    def state_and_group(entry: Path) -> tuple[str, int]:
        fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        return fields[0], int(fields[2])

    return [pid for pid, (state, group) in processes(state_and_group).items()
            if group == pgid and state != "Z"]


class Exposition:
    """A tiny HTTP server on a free loopback port: `path` answers `body(n)` for its n-th
    scrape; anything else is a 404. Records what it was sent."""

    def __init__(self, body: Callable[[int], str], path: str = "/metrics",
                 status: int = 200) -> None:
        self.scrapes = 0
        self.auth: list[str | None] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path != path:
                    self.send_error(404)
                    return
                owner.scrapes += 1
                owner.auth.append(self.headers.get("Authorization"))
                data = body(owner.scrapes).encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@contextlib.contextmanager
def metrics_text(body: Callable[[], str]) -> Iterator[str]:
    """A host's /metrics answering every scrape with `body()` (a node_exporter, an agent with
    another clock): its URL, the server shut after."""
    server = Exposition(lambda _: body())
    try:
        yield f"http://127.0.0.1:{server.port}/metrics"
    finally:
        server.close()


def on_disk(folder: Path) -> None:
    """Skips a test whose files in `folder` must be on a block device: on tmpfs no page is
    read from storage, nor dropped from the page cache."""
    from runners.host_agent.block_devices import disk_of

    if disk_of(os.stat(folder).st_dev) is None:
        pytest.skip(f"{folder} is on no block device (tmpfs?): its pages are neither read "
                    "from storage nor dropped")


def read_line(proc: subprocess.Popen, timeout_s: float = 30) -> str:
    """The next line of a process's unbuffered stdout pipe (so select sees every byte not
    yet read); fails the test where none comes within `timeout_s`."""
    out = b""
    while not out.endswith(b"\n"):
        ready, _, _ = select.select([proc.stdout], [], [], timeout_s)
        assert ready, f"no line from {proc.args[:4]} within {timeout_s} s: {out!r}"
        if not (byte := proc.stdout.read(1)):
            break
        out += byte
    return out.decode().strip()


@contextlib.contextmanager
def start_agent(*args: str) -> Iterator[tuple[str, subprocess.Popen, str]]:
    """`engram-bench agent ARGS` on a free loopback port: its /metrics URL, its process and
    its first line (read); stopped by SIGTERM after, which must end it with exit 0."""
    proc = subprocess.Popen([sys.executable, "-m", "engram_bench", "agent", "--port", "0",
                             *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            bufsize=0, cwd=ROOT)
    try:
        line = read_line(proc)
        found = re.search(r"serving (http://\S+/metrics)", line)
        assert found, line
        yield found.group(1), proc, line
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0, proc.stderr.read().decode()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@contextlib.contextmanager
def host_agent(pid: int, *tables: Path) -> Iterator[str]:
    """An agent on `pid`'s process tree (and the `tables`): its /metrics URL."""
    with start_agent("--pid", str(pid), *(f for t in tables for f in ("--table", str(t)))) as (
            url, _, _):
        yield url
