"""The bundled server for the runners' tests: in a thread over HTTP (`LiveServer`, with the
tiny preset's `options`), or as a subprocess as a user starts it (`serve`)."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from pathlib import Path

import uvicorn

from runners.engram.api import BODY_TIMEOUT_S, create_app
from runners.engram.http_server import HEADER_TIMEOUT_S, server_config
from runners.engram.runtime import Runtime, ServerOptions
from runners.lifecycle import free_port

ROOT = Path(__file__).resolve().parents[2]


class LiveServer:
    def __init__(self, runtime: Runtime, api_key: str | None = None,
                 header_timeout_s: float = HEADER_TIMEOUT_S,
                 body_timeout_s: float = BODY_TIMEOUT_S) -> None:
        self.runtime = runtime
        self.port = free_port()
        config = server_config(create_app(runtime, api_key, body_timeout_s), "127.0.0.1",
                               self.port, "error", header_timeout_s)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self):
        self.runtime.start()
        self.thread.start()
        deadline = time.monotonic() + 10
        while not self.server.started:
            assert time.monotonic() < deadline, "server did not start"
            time.sleep(0.02)
        return self

    def __exit__(self, *exc):
        self.server.should_exit = True
        self.thread.join(10)
        self.runtime.close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def options(tmp_path, **kw) -> ServerOptions:
    base = dict(preset="tiny", table_gib=0.004, results_dir=tmp_path, max_running=2,
                max_waiting=2)
    return ServerOptions(**{**base, **kw})


def serve(*flags: str, cwd) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "runners.engram", "--preset", "tiny",
                           "--table-size-gb", "0.004", *flags], cwd=cwd, capture_output=True,
                          text=True, timeout=120, env={"PYTHONPATH": str(ROOT)})
