"""Start and stop the bundled Engram server for a bench run (stdlib only: no torch here).

The server runs as its own process (`python -m runners.engram`) on a free loopback port,
with its log in results/logs/. It is stopped on every exit path: normal end, errors,
Ctrl-C; and, through PR_SET_PDEATHSIG, even when the bench process is killed outright.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path

_PR_SET_PDEATHSIG = 1


class ServerStartError(RuntimeError):
    """The bundled server did not come up; the message carries its own last words."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:  # runs in the child between fork and exec
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _tail(path: Path, lines: int = 6) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(text[-lines:])


class BundledServer:
    """`with BundledServer(args) as server:` -> server.url is an OpenAI base URL."""

    def __init__(self, server_args: Sequence[str], log_dir: Path = Path("results/logs"),
                 startup_timeout_s: float = 600.0, attempts: int = 3) -> None:
        self.server_args = list(server_args)
        self.log_dir = log_dir
        self.startup_timeout_s = startup_timeout_s
        self.attempts = attempts
        self.proc: subprocess.Popen | None = None
        self.port = 0
        self.log_path: Path | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def __enter__(self) -> BundledServer:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        for attempt in range(self.attempts):
            try:
                self._start()
                return self
            except ServerStartError as exc:
                self.stop()
                in_use = "address already in use" in str(exc).lower()
                if not in_use or attempt == self.attempts - 1:
                    raise
        raise AssertionError("unreachable")

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _start(self) -> None:
        self.port = free_port()  # a port taken meanwhile fails the start: retried on another
        stamp = time.strftime("%Y%m%d-%H%M%S")
        self.log_path = self.log_dir / f"server-{stamp}-{self.port}.log"
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "runners.engram", *self.server_args,
                 "--host", "127.0.0.1", "--port", str(self.port)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,  # Ctrl-C reaches the bench, which stops the server
                preexec_fn=_die_with_parent,
            )
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            code = self.proc.poll()
            if code is not None:
                raise ServerStartError(
                    f"the bundled server exited with code {code} while starting: "
                    f"{_tail(self.log_path)} (log: {self.log_path})")
            if self._healthy():
                return
            time.sleep(0.2)
        raise ServerStartError(f"the bundled server did not answer /health within "
                               f"{self.startup_timeout_s:g} s (log: {self.log_path})")

    def _healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=1) as r:
                return json.load(r).get("status") == "ok"
        except (OSError, ValueError):
            return False

    def stop(self) -> None:
        """SIGTERM (uvicorn shuts down, the table is unmapped), SIGKILL if it hangs."""
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)
