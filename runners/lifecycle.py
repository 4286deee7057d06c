"""Start and stop a server for a bench run (stdlib only: no torch here).

`ManagedServer` runs any command that serves OpenAI on `--host/--port` and answers /health
(the bundled Engram server, vLLM) as its own process group on a free loopback port, with its
log in results/logs/. It is stopped on every exit path: normal end, errors, Ctrl-C; and,
through PR_SET_PDEATHSIG, even when the bench process is killed outright. A server that dies
on its own (a crash, a kill -9) is noticed at once: what it left behind in its process group
(vLLM's engine and worker processes) is killed, and `death` says how it ended, with the last
lines of its log.
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
import threading
import time
import urllib.request
from collections.abc import Sequence
from pathlib import Path

_PR_SET_PDEATHSIG = 1


class ServerStartError(RuntimeError):
    """The server did not come up; the message carries its own last words."""


class ServerDied(RuntimeError):
    """The server exited during the run without being asked to; the message ends with the
    last lines of its log."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def die_with_parent() -> None:  # runs in the child between fork and exec
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _tail(path: Path, lines: int = 6) -> str:
    try:
        text = path.read_text(errors="replace").strip().splitlines()
    except OSError:
        return ""
    return " | ".join(text[-lines:])


def _kill_group(pgid: int, sig: int) -> bool:
    """Signal a process group; False when nothing is left in it."""
    try:
        os.killpg(pgid, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


class ManagedServer:
    """`with ManagedServer(command) as server:` -> server.url is an OpenAI base URL.

    `command` is the whole argv but `--host 127.0.0.1 --port N`, which are appended; `name`
    names the server in messages; `env` replaces the environment when given.
    """

    def __init__(self, command: Sequence[str], name: str = "the server",
                 log_dir: Path = Path("results/logs"), startup_timeout_s: float = 600.0,
                 attempts: int = 3, env: dict[str, str] | None = None,
                 log_prefix: str = "server") -> None:
        self.command = list(command)
        self.name = name
        self.log_dir = log_dir
        self.startup_timeout_s = startup_timeout_s
        self.attempts = attempts
        self.env = env
        self.log_prefix = log_prefix
        self.proc: subprocess.Popen | None = None
        self.port = 0
        self.log_path: Path | None = None
        self.start_s = 0.0  # seconds from launch to a healthy /health
        self.death: str | None = None  # set when it exited without being stopped
        self._stopping = threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def pid(self) -> int | None:
        """The server's process, the root of its process tree; None when not running."""
        return self.proc.pid if self.proc else None

    def __enter__(self) -> ManagedServer:
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
        self.log_path = self.log_dir / f"{self.log_prefix}-{stamp}-{self.port}.log"
        self._stopping.clear()
        self.death = None
        t0 = time.monotonic()
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [*self.command, "--host", "127.0.0.1", "--port", str(self.port)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=self.env,
                start_new_session=True,  # Ctrl-C reaches the bench, which stops the server
                preexec_fn=die_with_parent,
            )
        deadline = t0 + self.startup_timeout_s
        while time.monotonic() < deadline:
            code = self.proc.poll()
            if code is not None:
                raise ServerStartError(
                    f"{self.name} exited with code {code} while starting: "
                    f"{_tail(self.log_path)} (log: {self.log_path})")
            if self._healthy():
                self.start_s = time.monotonic() - t0
                threading.Thread(target=self._watch, args=(self.proc,), daemon=True,
                                 name="server-watch").start()
                return
            time.sleep(0.2)
        raise ServerStartError(f"{self.name} did not answer /health within "
                               f"{self.startup_timeout_s:g} s (log: {self.log_path})")

    def _healthy(self) -> bool:
        """HTTP 200 on /health; a JSON body with a `status` must say ok (vLLM's is empty)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=1) as r:
                body = r.read()
                if r.status != 200:
                    return False
        except OSError:
            return False
        try:
            data = json.loads(body) if body.strip() else {}
        except ValueError:
            return True
        return not isinstance(data, dict) or data.get("status", "ok") == "ok"

    def _watch(self, proc: subprocess.Popen) -> None:
        """A death not asked for: note how it ended, kill what it left in its group."""
        code = proc.wait()
        if self._stopping.is_set():
            return
        _kill_group(proc.pid, signal.SIGKILL)
        how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
        self.death = (f"{self.name} {how} during the run; its log ends: "
                      f"{_tail(self.log_path) if self.log_path else ''} (log: {self.log_path})")

    def death_within(self, grace_s: float) -> str | None:
        """How it died, waiting up to `grace_s` for that while it no longer answers /health:
        a server shutting down after a crash may refuse connections a while before its
        process ends. None while it is healthy."""
        deadline = time.monotonic() + grace_s
        while self.death is None and time.monotonic() < deadline and not self._healthy():
            time.sleep(0.2)
        return self.death

    def stop(self) -> None:
        """SIGTERM to the group (the server shuts down cleanly), SIGKILL if it hangs; then
        whatever is left in the group (children of a server that died first) is killed."""
        self._stopping.set()
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.poll() is None:
            _kill_group(proc.pid, signal.SIGTERM)
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                _kill_group(proc.pid, signal.SIGKILL)
                proc.wait(5)
        deadline = time.monotonic() + 5  # its children, which end with it or are ended here
        while _kill_group(proc.pid, 0) and time.monotonic() < deadline:
            time.sleep(0.1)
        _kill_group(proc.pid, signal.SIGKILL)


class BundledServer(ManagedServer):
    """`with BundledServer(args) as server:` -> the bundled Engram server
    (`python -m runners.engram ARGS`); server.url is an OpenAI base URL."""

    def __init__(self, server_args: Sequence[str], log_dir: Path = Path("results/logs"),
                 startup_timeout_s: float = 600.0, attempts: int = 3) -> None:
        self.server_args = list(server_args)
        super().__init__([sys.executable, "-m", "runners.engram", *self.server_args],
                         "the bundled server", log_dir, startup_timeout_s, attempts)
