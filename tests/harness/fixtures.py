"""Deterministic test inputs: request records (no clock, no randomness beyond a fixed seed),
every way a byte string can arrive, a server that answers with canned bytes, and the client
that sends requests to it one by one."""

from __future__ import annotations

import contextlib
import random
import socket
import threading
import time
from collections.abc import Iterator

from harness.records import RequestRecord
from harness.run import aio
from harness.run.workload import payload
from harness.wire.client import Clock, ConnectionPool, build_request, stream_completion
from harness.wire.endpoint import Endpoint

T0 = 1_790_000_000.0


def make_records(levels=(1, 2, 4), rounds=3, output_tokens=128, seed=7) -> list[RequestRecord]:
    rng = random.Random(seed)
    records = []
    for c in levels:
        start = T0 + c * 100
        for rnd in range(rounds):
            for w in range(c):
                ttft = 100 + 40 * c + rng.uniform(0, 30)
                latency = ttft + 127 * (8 + c) + rng.uniform(0, 50)
                tokens = output_tokens if rng.random() > 0.1 else output_tokens - 5
                rec = RequestRecord(
                    request_id=f"run-c{c}-r{rnd}-w{w}", concurrency=c, round=rnd, worker=w,
                    sent_at=round(start + rnd * 2.0 + w * 0.001, 6), ttft_ms=ttft,
                    latency_ms=latency, output_tokens=tokens, input_tokens=128,
                    chunks=tokens, max_gap_ms=9.0, finish_reason="length", http_status=200,
                )
                if c == 4 and rnd == 1 and w == 2:
                    rec.error_kind, rec.error_message = "http_error", "HTTP 500"
                    rec.http_status = 500
                    rec.ttft_ms, rec.output_tokens, rec.chunks = None, 0, 0
                records.append(rec)
    return records


def splits(data: bytes) -> Iterator[list[bytes]]:
    """`data` as a parser may receive it: byte by byte, then cut in two at every offset."""
    yield [data[i : i + 1] for i in range(len(data))]
    for i in range(len(data) + 1):
        yield [data[:i], data[i:]]


class CannedServer:
    """Answers every request with fixed bytes, each piece its own send a little apart (so the
    client reads them separately), then closes; keeps each request head it read."""

    def __init__(self, pieces: list[bytes], host: str = "127.0.0.1") -> None:
        self.pieces = pieces
        self.heads: list[bytes] = []
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self._sock = socket.create_server((host, 0), family=family)
        self.port = self._sock.getsockname()[1]
        bracketed = f"[{host}]" if ":" in host else host
        self.url = f"http://{bracketed}:{self.port}/v1"
        self._sock.settimeout(0.05)  # so the accept loop sees `_stop`
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> CannedServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        self._sock.close()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            conn.settimeout(5)
            with conn, contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self._answer(conn)  # a client may cut the answer off: that is its right

    def _answer(self, conn: socket.socket) -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            more = conn.recv(65536)
            if not more:
                return
            data += more
        head, _, body = data.partition(b"\r\n\r\n")
        length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                       if line.lower().startswith(b"content-length:")), 0)
        while len(body) < length:
            body += conn.recv(65536)
        self.heads.append(head)
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        for piece in self.pieces:
            conn.sendall(piece)
            time.sleep(0.02)


def send(url: str, *ids: str, output_tokens: int = 8, pool: ConnectionPool | None = None,
         request_timeout: float = 10.0, stall_timeout: float | None = None,
         **endpoint: object) -> list[RequestRecord]:
    """Send the requests one after another on one pool (so later ones reuse a connection)."""
    ep = Endpoint(url, **endpoint)

    async def main() -> list[RequestRecord]:
        conns = pool or ConnectionPool(ep, connect_timeout=2.0)
        clock = Clock()
        records = []
        for request_id in ids:
            body = payload("chat", "mock-model", "Hello there.", output_tokens, 0.0)
            records.append(await stream_completion(
                conns, build_request(ep, body, request_id),
                RequestRecord(request_id, 1, 0, 0, 0.0), clock, request_timeout, stall_timeout))
        conns.close()
        return records

    return aio.run(main())


def delta(content: str) -> bytes:
    """One stream event's data: a chat delta that carries `content`."""
    return b'{"choices":[{"index":0,"delta":{"content":"%s"}}]}' % content.encode()
