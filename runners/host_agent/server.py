"""/metrics over HTTP: GET /metrics answers the registry in Prometheus text; every other path
is 404, so the agent serves its counters and nothing else. Scrapes are answered in threads of
their own; the collector runs them one at a time."""

from __future__ import annotations

import signal
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest


class BindError(OSError):
    """The address cannot be served; one sentence for the user."""


def _handler(registry: CollectorRegistry) -> type[BaseHTTPRequestHandler]:
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

        def log_message(self, format: str, *args: object) -> None:
            """Quiet: a scrape a second would fill a terminal."""

    return Handler


class _Server(ThreadingHTTPServer):
    daemon_threads = True


class _Server6(_Server):
    address_family = socket.AF_INET6


class MetricsServer:
    def __init__(self, registry: CollectorRegistry, host: str, port: int) -> None:
        server = _Server6 if ":" in host else _Server
        try:
            self._server = server((host, port), _handler(registry))
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
