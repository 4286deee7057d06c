"""/metrics over HTTP: GET /metrics answers the registry in Prometheus text; POST /table/drop
and POST /table/warm (?budget_bytes=N) set the table's start state (runners.host_agent.
table_state) on the files the agent was given and answer what they did in JSON; every other
path is 404, so the agent serves its counters and nothing else. Requests are answered in
threads of their own; the collector runs scrapes one at a time."""

from __future__ import annotations

import json
import signal
import socket
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

# a POST's path and query -> (HTTP status, the JSON answer)
Control = Callable[[str, dict[str, list[str]]], tuple[int, dict[str, object]]]


class BindError(OSError):
    """The address cannot be served; one sentence for the user."""


def _handler(registry: CollectorRegistry, control: Control | None
             ) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path.split("?", 1)[0] != "/metrics":
                self.send_error(404, "only /metrics is served")
                return
            body = generate_latest(registry)
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE_LATEST)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            parts = urlsplit(self.path)
            if control is None or not parts.path.startswith("/table/"):
                self.send_error(404, "only /metrics is served")
                return
            status, answer = control(parts.path, parse_qs(parts.query))
            body = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            """Quiet: a scrape a second would fill a terminal."""

    return Handler


class _Server(ThreadingHTTPServer):
    daemon_threads = True


class _Server6(_Server):
    address_family = socket.AF_INET6


class MetricsServer:
    def __init__(self, registry: CollectorRegistry, host: str, port: int,
                 control: Control | None = None) -> None:
        server = _Server6 if ":" in host else _Server
        try:
            self._server = server((host, port), _handler(registry, control))
        except OSError as exc:
            raise BindError(f"cannot serve on {host}:{port}: {exc.strerror or exc}") from None
        bound_port = self._server.server_address[1]
        shown = f"[{host}]" if ":" in host else host
        self.url = f"http://{shown}:{bound_port}/metrics"

    def serve_until_signalled(self) -> None:
        """Serves until SIGINT, SIGTERM or SIGHUP, then closes its socket."""
        stop = threading.Event()
        previous = {sig: signal.signal(sig, lambda *_: stop.set())
                    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
        thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        thread.start()
        try:
            stop.wait()
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            self._server.shutdown()
            self._server.server_close()
