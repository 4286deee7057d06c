"""Streaming completion client on raw asyncio transports, built for timing accuracy.

Why not httpx: on loopback a generic client adds 10-30 ms of TTFT bias (headers and body in
two writes meet Nagle and delayed ACK) and ~100 us of CPU per chunk. Here the request goes out
in one write on a pre-opened TCP_NODELAY connection, and every chunk is timestamped in
`data_received`, before any coroutine is scheduled.
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from typing import cast

from harness.completion_stream import CompletionStream, StreamFault
from harness.endpoint import Endpoint
from harness.http1 import ProtocolError, ResponseParser
from harness.records import RequestRecord
from harness.sse import SSEDecoder

_ERROR_BODY_LIMIT = 4096


class Clock:
    """One wall-clock anchor per run; everything else is `perf_counter_ns` offsets."""

    __slots__ = ("anchor_ns", "anchor_wall")

    def __init__(self) -> None:
        self.anchor_wall = time.time()
        self.anchor_ns = time.perf_counter_ns()

    def wall(self, ns: int) -> float:
        return self.anchor_wall + (ns - self.anchor_ns) / 1e9


class _Exchange:
    """One request/response on a connection; resolves `future` exactly once."""

    __slots__ = ("end_ns", "error", "error_body", "future", "parser", "received", "sse", "stream")

    def __init__(self, future: asyncio.Future[None]) -> None:
        self.future = future
        self.parser = ResponseParser()
        self.sse = SSEDecoder()
        self.stream = CompletionStream()
        self.error: tuple[str, str] | None = None
        self.error_body = bytearray()
        self.received = False
        self.end_ns = 0

    def finish(self, error: tuple[str, str] | None = None) -> None:
        """Called from the protocol callback, so `end_ns` is when the bytes arrived."""
        if not self.future.done():
            self.end_ns = time.perf_counter_ns()
            self.error = error
            self.future.set_result(None)


class _Connection(asyncio.Protocol):
    """A keep-alive HTTP/1.1 connection carrying one exchange at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.exchange: _Exchange | None = None
        self.closed = False
        self.used = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is no subclass
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def send(self, exchange: _Exchange, data: bytes) -> int:
        """Write the whole request in one call; returns the send time in ns."""
        self.exchange = exchange
        self.used = True
        assert self.transport is not None
        sent_ns = time.perf_counter_ns()
        self.transport.write(data)
        return sent_ns

    def data_received(self, data: bytes) -> None:
        now_ns = time.perf_counter_ns()
        ex = self.exchange
        if ex is None:  # bytes nobody asked for: this connection is no longer usable
            self.abort()
            return
        ex.received = True
        try:
            body = ex.parser.feed(data)
            if ex.parser.status >= 300 or (0 < ex.parser.status < 200):
                ex.error_body += body[: _ERROR_BODY_LIMIT - len(ex.error_body)]
            elif body:
                for payload in ex.sse.feed(body):
                    ex.stream.add(payload, now_ns)
                    if ex.stream.saw_done:
                        break
        except ProtocolError as exc:
            self.abort()
            ex.finish(("malformed", f"invalid HTTP response: {exc}"))
            return
        except StreamFault as exc:
            self.abort()
            ex.finish((exc.kind, str(exc)))
            return
        if ex.parser.done:
            self.exchange = None
            if not ex.parser.keep_alive:
                self.abort()
            ex.finish()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        ex = self.exchange
        if ex is None:
            return
        self.exchange = None
        ex.parser.feed_eof()
        if ex.parser.done:
            ex.finish()
        else:
            ex.finish(("dropped", "server closed the connection before the response ended"))

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()


class ConnectionPool:
    """Keep-alive connections to one endpoint, opened ahead of a level's clock."""

    def __init__(self, endpoint: Endpoint, connect_timeout: float = 10.0) -> None:
        self.endpoint = endpoint
        self.connect_timeout = connect_timeout
        self._idle: list[_Connection] = []
        self._ssl = endpoint.ssl_context()

    async def _open(self) -> _Connection:
        loop = asyncio.get_running_loop()
        _, protocol = await asyncio.wait_for(
            loop.create_connection(
                _Connection, self.endpoint.host, self.endpoint.port, ssl=self._ssl
            ),
            self.connect_timeout,
        )
        return protocol

    async def warm(self, count: int) -> None:
        """Open connections until `count` are idle, so no request pays for a handshake."""
        self._idle = [c for c in self._idle if not c.closed]
        missing = count - len(self._idle)
        if missing > 0:
            self._idle += await asyncio.gather(*(self._open() for _ in range(missing)))

    async def acquire(self) -> _Connection:
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed:
                return conn
        return await self._open()

    def release(self, conn: _Connection) -> None:
        if not conn.closed and conn.exchange is None:
            self._idle.append(conn)

    def close(self) -> None:
        for conn in self._idle:
            conn.abort()
        self._idle.clear()


def build_request(endpoint: Endpoint, payload: dict, request_id: str) -> bytes:
    """The whole HTTP request as one buffer, so it leaves in a single write."""
    body = json.dumps(payload, separators=(",", ":")).encode()
    headers = [
        f"POST {endpoint.completion_path} HTTP/1.1",
        f"Host: {endpoint.host}:{endpoint.port}",
        "Content-Type: application/json",
        "Accept: text/event-stream",
        "Accept-Encoding: identity",
        f"X-Request-Id: {request_id}",
        f"Content-Length: {len(body)}",
    ]
    headers += [f"{k}: {v}" for k, v in endpoint.auth_headers().items()]
    return ("\r\n".join(headers) + "\r\n\r\n").encode() + body


async def stream_completion(
    pool: ConnectionPool,
    request: bytes,
    record: RequestRecord,
    clock: Clock,
    timeout: float,
) -> RequestRecord:
    """Send one prepared request and fill `record` with what the stream showed."""
    loop = asyncio.get_running_loop()
    for attempt in (0, 1):
        try:
            conn = await pool.acquire()
        except (TimeoutError, OSError) as exc:
            record.sent_at = clock.wall(time.perf_counter_ns())
            record.error_kind = "connect_error"
            record.error_message = _describe(exc) or "connection timed out"
            return record
        reused = conn.used
        exchange = _Exchange(loop.create_future())
        sent_ns = conn.send(exchange, request)
        timer = loop.call_later(
            timeout, exchange.finish, ("timeout", f"no end of stream after {timeout:g} s")
        )
        await exchange.future
        timer.cancel()
        if exchange.error is not None and exchange.error[0] == "timeout":
            conn.abort()
        # A reused keep-alive connection the server closed while idle: retry once, fresh.
        stale = exchange.error is not None and exchange.error[0] == "dropped"
        if stale and reused and not exchange.received and attempt == 0:
            continue
        pool.release(conn)
        break
    _fill(record, exchange, clock, sent_ns, exchange.end_ns)
    return record


def _fill(
    record: RequestRecord, ex: _Exchange, clock: Clock, sent_ns: int, end_ns: int
) -> None:
    stream = ex.stream
    record.sent_at = clock.wall(sent_ns)
    record.latency_ms = (end_ns - sent_ns) / 1e6
    record.chunks = stream.chunks
    record.finish_reason = stream.finish_reason
    record.input_tokens = stream.prompt_tokens
    if stream.chunks:
        record.ttft_ms = (stream.first_ns - sent_ns) / 1e6
        record.max_gap_ms = stream.max_gap_ns / 1e6 if stream.chunks > 1 else None
    if stream.completion_tokens is not None:
        record.output_tokens = stream.completion_tokens
    else:
        record.output_tokens = stream.chunks
        record.output_tokens_estimated = True
    status = ex.parser.status
    if status:
        record.http_status = status
    if ex.error is not None:
        record.error_kind, record.error_message = ex.error
    elif not 200 <= status < 300:
        record.error_kind = "http_error"
        record.error_message = _error_message(status, bytes(ex.error_body))


def _error_message(status: int, body: bytes) -> str:
    """The server's own error text where it gave one (OpenAI, FastAPI or plain)."""
    text = body.decode("utf-8", "replace").strip()
    try:
        obj = json.loads(text)
    except ValueError:
        obj = None
    if isinstance(obj, dict):
        error = obj.get("error", obj.get("detail", obj.get("message")))
        if isinstance(error, dict):
            error = error.get("message", error)
        if error:
            text = str(error)
    return f"HTTP {status}: {text[:300]}" if text else f"HTTP {status}"


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
