"""Shared fixtures: the fake OpenAI server, in-thread or as its own process, and a sweep
against it into a temporary store."""

from __future__ import annotations

import contextlib
import dataclasses
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.config import RunConfig
from harness.mock_server import MockConfig, ThreadedMockServer
from harness.results.metrics import Targets
from harness.results.store import Store
from harness.run import aio
from harness.run.progress import LevelProgress
from harness.run.session import execute, new_run_id
from harness.wire.endpoint import Endpoint
from runners.lifecycle import free_port
from tests.helpers import FAST, ROOT, SweepResult, wait_for_port


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

