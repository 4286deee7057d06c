"""Shared fixtures: the fake OpenAI server, in-thread or as its own process."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from harness.mock_server import MockConfig, ThreadedMockServer
from runners.lifecycle import free_port

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def mock_server() -> Iterator[ThreadedMockServer]:
    """A fast fake server on a loopback port; reconfigure with `.configure(...)`."""
    with ThreadedMockServer(MockConfig(ttft_ms=5, itl_ms=1)) as server:
        yield server


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
