"""Shared fixtures: the fake OpenAI server, in-thread or as its own process, and a sweep
against it into a temporary store."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.config import RunConfig
from harness.mock_server import MockConfig, ThreadedMockServer
from harness.records import RequestRecord
from harness.results.metrics import Targets
from harness.results.store import Store
from harness.run import aio
from harness.run.progress import LevelProgress
from harness.run.session import RunResult, execute, new_run_id
from harness.wire.endpoint import Endpoint
from runners.lifecycle import free_port

ROOT = Path(__file__).resolve().parent.parent
FAST = {"ttft_ms": 5, "itl_ms": 1}  # the knobs `mock_server` starts with


@pytest.fixture
def mock_server() -> Iterator[ThreadedMockServer]:
    """A fast fake server on a loopback port; reconfigure with `.configure(...)`."""
    with ThreadedMockServer(MockConfig(**FAST)) as server:
        yield server


@pytest.fixture
def start_mock() -> Iterator[Callable[..., ThreadedMockServer]]:
    """Start fake servers in threads, each stopped at teardown: `start_mock(MockConfig(...))`
    runs exactly that config, `start_mock(shared_decode=True)` sets knobs over `FAST`."""
    with contextlib.ExitStack() as stack:

        def start(config: MockConfig | None = None, **knobs: Any) -> ThreadedMockServer:
            if config is None:
                config = MockConfig(**{**FAST, **knobs})
            elif knobs:
                config = dataclasses.replace(config, **knobs)
            return stack.enter_context(ThreadedMockServer(config))

        yield start


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
    def run(self) -> dict:
        """The stored run row, read now."""
        return self.store.run(self.run_id)

    @property
    def records(self) -> list[RequestRecord]:
        """The stored requests, read now."""
        return self.store.requests(self.run_id)


@pytest.fixture
def sweep(tmp_path: Path, start_mock: Callable[..., ThreadedMockServer]
          ) -> Callable[..., SweepResult]:
    """Run a sweep in-process, as `engram-bench run --url` does, against a fake server.

    `sweep(mock, **overrides)`: `mock` is a MockConfig, a dict of knobs over `FAST`, None (a
    fresh `FAST` server), or a server already running (`mock_server`, an earlier result's
    `.server`), which is then reused; fresh servers stop at teardown. `overrides` are
    RunConfig fields (url is the server's, model "" asks the server; the rest default as
    RunConfig's), or `config=` a whole RunConfig. The store is `tmp_path / db`, or `store=`
    an earlier one; `run_id` (default new), `resume`, `targets` go to `execute`; `progress`
    is a LevelProgress or whether one is enabled (default: off).
    """

    def run(
        mock: MockConfig | dict[str, Any] | ThreadedMockServer | None = None, *,
        config: RunConfig | None = None, db: str = "bench.duckdb", store: Store | None = None,
        run_id: str | None = None, resume: bool = False, targets: Targets | None = None,
        progress: LevelProgress | bool = False, **overrides: Any,
    ) -> SweepResult:
        if isinstance(mock, ThreadedMockServer):
            server = mock
        elif isinstance(mock, dict):
            server = start_mock(**mock)
        else:
            server = start_mock(mock)
        if config is None:
            config = RunConfig(**{"url": server.url, "model": "", **overrides})
        elif overrides:
            config = dataclasses.replace(config, **overrides)
        if store is None:
            store = Store(tmp_path / db)
            store.initialise()
        if not isinstance(progress, LevelProgress):
            progress = LevelProgress(enabled=progress)
        endpoint = Endpoint(config.url, config.api)
        result = aio.run(execute(config, endpoint, store, progress, run_id or new_run_id(),
                                 resume=resume, targets=targets))
        return SweepResult(server, store, config, result)

    return run


def wait_for_port(port: int, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listens on port {port}")


@pytest.fixture
def mock_process() -> Iterator[Callable[..., str]]:
    """Start the fake server as a separate process (own GIL), stopped at teardown."""
    procs: list[subprocess.Popen] = []

    def start(*flags: str) -> str:
        port = free_port()
        proc = subprocess.Popen(
            [sys.executable, "-m", "harness.mock_server", "--port", str(port), *flags],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=ROOT,
        )
        procs.append(proc)
        wait_for_port(port)
        return f"http://127.0.0.1:{port}/v1"

    yield start
    for proc in procs:
        proc.terminate()
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()


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
