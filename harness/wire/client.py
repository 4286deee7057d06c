"""Streaming completion client on raw asyncio transports, built for timing accuracy.

Why not a generic client: against the fake server's own log (`make bench-harness`), a plain
httpx streaming client reads TTFT 1-2 ms late at C<=8, 12.5 ms late (p99 55 ms) at C=32, and
cannot keep up at C=128 (~170 us CPU per chunk); plain aiohttp is 0.7-0.9 ms late at C<=8,
2.4 ms at C=32 and 8 ms at C=128, with ~1.5x this client's CPU per chunk. Here the request
goes out in one write on a pre-opened TCP_NODELAY connection (a client that writes headers
and body apart without it can stall 40 ms on Nagle + delayed ACK, docs/design.md), and every chunk
is timestamped in `data_received`, before any coroutine is scheduled.

One route: the control-plane calls (`get`, used by target.py) run on these same connections,
so the pre-flight check and the sweep share TLS settings and neither uses a proxy (see
endpoint.check_proxies).
"""

from __future__ import annotations

import array
import asyncio
import fcntl
import json
import os
import socket
import ssl
import struct
import termios
import time
import weakref
from dataclasses import dataclass
from typing import Any, cast

from harness.records import RequestRecord
from harness.wire.completion_stream import CompletionStream, StreamFault
from harness.wire.endpoint import Endpoint, check_proxies
from harness.wire.http1 import ProtocolError, ResponseParser
from harness.wire.sse import SSEDecoder

_ERROR_BODY_LIMIT = 4096
_PREVIEW_CHARS = 200  # of a 2xx body that is not an event stream, in its error message
_GET_BODY_LIMIT = 16 * 1024 * 1024
_DRAIN_S = 1.0  # a body may go on this long past its stream's [DONE] before it is cut off
# how OpenSSL names a handshake answered by bytes that are no TLS record (plain HTTP, say)
_NOT_TLS_REASONS = {"WRONG_VERSION_NUMBER", "PACKET_LENGTH_TOO_LONG", "RECORD_LAYER_FAILURE",
                    "UNKNOWN_PROTOCOL", "HTTP_REQUEST"}
# struct tcp_info: 8 bytes of flags, then u32s of which tcpi_last_data_recv (ms since the
# connection last received data, in ticks of the kernel's clock) is the twelfth
_TCP_INFO_BYTES = 104
_LAST_DATA_RECV = struct.Struct("I")
_LAST_DATA_RECV_AT = 8 + 11 * 4
# this process's first reads: how long the bytes of each request's first token had been in
# its socket when the loop read them: the kernel's tcpi_last_data_recv, which dates the newest
# bytes, dated back by the stream's own spacing where that read brought later tokens too (an
# estimate then: first_token_wait_ms); LoopMonitor takes them per level
FIRST_READ_LAGS_MS: list[float] = []
# the connections of a pass whose first reads are dated: all up to this many, every k-th one
# beyond (the kernel's tick is a few ms, so a mean over this many is exact to ~0.1 ms); each
# date is a syscall in the loop's read callback, paid in a burst of first tokens by every
# read queued behind it
FIRST_READS_DATED = 64


class Clock:
    """One wall-clock anchor per run; everything else is `perf_counter_ns` offsets."""

    __slots__ = ("anchor_ns", "anchor_wall")

    def __init__(self) -> None:
        self.anchor_wall = time.time()
        self.anchor_ns = time.perf_counter_ns()

    def wall(self, ns: int) -> float:
        return self.anchor_wall + (ns - self.anchor_ns) / 1e9


class NotTLSError(ConnectionError):
    """The TCP connection opened, but the TLS handshake met no TLS: no answer within the
    connect timeout (`kind` connect_timeout) or another protocol's bytes (connect_error)."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class WireError(Exception):
    """A control-plane request failed; `kind` is one of records.ERROR_KINDS."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(slots=True, frozen=True)
class Response:
    """A whole (non-streamed) answer; header names are lower case."""

    status: int
    headers: dict[str, str]
    body: bytes


class _Exchange:
    """One request/response on a connection; resolves `future` exactly once.

    `events` is None until the final head arrives, then whether the body is an event stream
    (decoded as it arrives) or a body to keep (up to `body_limit` bytes, for messages).
    An event stream's answer is complete at its [DONE] (`done_ns`, when that arrived): the
    exchange then ends as a success, at that time, however the body goes on or breaks off.
    """

    __slots__ = (
        "body", "body_limit", "done_ns", "drain", "end_ns", "error", "events", "first_read",
        "future", "parser", "received", "sse", "stream",
    )

    def __init__(
        self, future: asyncio.Future[None], events: bool | None = None,
        body_limit: int = _ERROR_BODY_LIMIT, keep_text: bool = False,
    ) -> None:
        self.future = future
        self.parser = ResponseParser()
        self.sse = SSEDecoder()
        self.stream = CompletionStream(keep_text)
        self.events = events
        self.body = bytearray()
        self.body_limit = body_limit
        self.error: tuple[str, str] | None = None
        self.received = False
        self.end_ns = 0
        self.done_ns = 0
        self.drain: asyncio.TimerHandle | None = None  # bounds the body's rest after [DONE]
        # the read that brought the first token, when it brought later ones too: the kernel's
        # ms since the newest bytes arrived, and the token chunks it held (first_token_wait_ms)
        self.first_read: tuple[int, int] | None = None

    def finish(self, error: tuple[str, str] | None = None) -> None:
        """Called from the protocol callback, so `end_ns` is when the bytes arrived."""
        if self.drain is not None:
            self.drain.cancel()
            self.drain = None
        if not self.future.done():
            self.end_ns = self.done_ns or time.perf_counter_ns()
            self.error = None if self.done_ns else error
            self.future.set_result(None)


class _Connection(asyncio.Protocol):
    """A keep-alive HTTP/1.1 connection carrying one exchange at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.exchange: _Exchange | None = None
        self.closed = False
        self.pooled = False  # it waited idle in a pool, where the server may have closed it
        self.fd = -1
        self.sock: Any = None  # the transport's socket (asyncio's wrapper)
        self.dates_first_read = True  # this connection's first reads feed the self-check

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is no subclass
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.fd = sock.fileno()
            self.sock = sock

    def _first_read(self, ex: _Exchange) -> None:
        """How long the first token's bytes waited in the socket before this read, kept for
        the level's self-check (a loop busy with other streams reads them late): the kernel's
        time since the connection last received data (TCP_INFO). That dates the newest bytes
        read, so a read that brought later tokens too is finished when the stream ends
        (`_note_first_read`)."""
        if self.sock is None:
            return
        try:
            info = self.sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _TCP_INFO_BYTES)
        except OSError:
            return
        if len(info) < _LAST_DATA_RECV_AT + 4:
            return
        newest_ms = _LAST_DATA_RECV.unpack_from(info, _LAST_DATA_RECV_AT)[0]
        if ex.stream.chunks == 1:
            FIRST_READ_LAGS_MS.append(newest_ms)
        else:
            ex.first_read = (newest_ms, ex.stream.chunks)

    def unread_bytes(self) -> int:
        """Bytes the kernel holds for this connection that the loop has not read yet."""
        if self.closed or self.fd < 0:
            return 0
        count = array.array("i", [0])
        try:
            fcntl.ioctl(self.fd, termios.FIONREAD, count)
        except OSError:
            return 0
        return count[0]

    def send(self, exchange: _Exchange, data: bytes) -> int:
        """Write the whole request in one call; returns the send time in ns. A connection the
        server closed meanwhile ends the exchange `dropped` (a pooled one is then re-sent)."""
        self.exchange = exchange
        assert self.transport is not None
        sent_ns = time.perf_counter_ns()
        if self.closed or self.transport.is_closing():  # uvloop's write would raise
            exchange.finish(("dropped", "the server closed the connection before the request "
                                        "was sent"))
        else:
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
            if ex.events is None and ex.parser.status:
                ex.events = _is_event_stream(ex.parser)
            if body:
                if ex.events:
                    if not ex.done_ns:  # past [DONE] the body is only read to its end
                        first = ex.stream.chunks == 0
                        for payload in ex.sse.feed(body):
                            ex.stream.add(payload, now_ns)
                            if ex.stream.saw_done:
                                ex.done_ns = now_ns
                                break
                        if first and ex.stream.chunks and self.dates_first_read:
                            self._first_read(ex)
                else:
                    ex.body += body[: ex.body_limit - len(ex.body)]
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
        elif ex.done_ns and ex.drain is None:
            # the rest normally follows at once, and the connection is reused; a body that
            # goes on is cut off (the answer's time is its [DONE]'s all the same)
            ex.drain = asyncio.get_running_loop().call_later(_DRAIN_S, self._cut_off, ex)

    def _cut_off(self, ex: _Exchange) -> None:
        """The body went on past its [DONE] for `_DRAIN_S`: the answer is complete, the
        connection mid-body no use for the next request."""
        ex.drain = None
        if self.exchange is ex:
            self.exchange = None
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


def first_token_wait_ms(newest_ms: float, together: int, times_ns: list[int]) -> float:
    """How long a first token waited in its socket when the loop read it together with the
    `together - 1` token chunks after it. The kernel's figure (`newest_ms`) dates the newest of
    them; the first had arrived earlier by their spacing, which the stream's later reads show
    (their mean gap per chunk). It errs short where the loop catches up, and long where a
    server behind its own schedule sent the tokens together (C=1024 beside one saturated fake
    server: 20 ms against 2 ms in its log): a level flagged so is one the server could not
    hold either. A stream read whole at once shows no spacing: the kernel's figure is all
    there is."""
    later = len(times_ns) - together
    if together < 2 or later < 1:
        return newest_ms
    spacing_ms = (times_ns[-1] - times_ns[together - 1]) / later / 1e6
    return newest_ms + (together - 1) * spacing_ms


def _note_first_read(ex: _Exchange) -> None:
    """An ended stream's first read, if it brought later tokens too, to the self-check."""
    if ex.first_read is not None:
        FIRST_READ_LAGS_MS.append(first_token_wait_ms(*ex.first_read, ex.stream.times_ns))
        ex.first_read = None


def _is_event_stream(parser: ResponseParser) -> bool:
    media_type = parser.headers.get("content-type", "").split(";", 1)[0]
    return 200 <= parser.status < 300 and media_type.strip().lower() == "text/event-stream"


class ConnectionPool:
    """Keep-alive connections to one endpoint, opened ahead of a level's clock.

    EndpointError at construction when a proxy variable would apply to the endpoint.
    """

    def __init__(self, endpoint: Endpoint, connect_timeout: float = 10.0) -> None:
        check_proxies(endpoint, os.environ)
        self.endpoint = endpoint
        self.connect_timeout = connect_timeout
        self._idle: list[_Connection] = []
        self._opened: weakref.WeakSet[_Connection] = weakref.WeakSet()
        self._opened_count = 0
        self._date_every = 1  # every k-th connection dates its first reads (FIRST_READS_DATED)
        self._ssl = endpoint.ssl_context()

    async def _open(self) -> _Connection:
        """TimeoutError past `connect_timeout` (TCP and TLS handshake together), NotTLSError
        when TCP connected but the handshake met no TLS, else OSError."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.connect_timeout
        transport, protocol = await asyncio.wait_for(
            loop.create_connection(_Connection, self.endpoint.host, self.endpoint.port),
            self.connect_timeout,
        )
        if self._ssl is not None:  # apart from the TCP connect, to tell its failures apart
            try:
                protocol.transport = cast(asyncio.Transport, await asyncio.wait_for(
                    loop.start_tls(transport, protocol, self._ssl,
                                   server_hostname=self.endpoint.host),
                    max(deadline - loop.time(), 0)))
            except BaseException as exc:
                transport.abort()
                raise self._not_tls(exc) or exc from None
        self._opened.add(protocol)
        protocol.dates_first_read = self._opened_count % self._date_every == 0
        self._opened_count += 1
        return protocol

    def _not_tls(self, exc: BaseException) -> NotTLSError | None:
        """The handshake's failure said in terms of what answered it, where that is plain."""
        where = f"{self.endpoint.authority} (https)"
        if isinstance(exc, TimeoutError):
            return NotTLSError("connect_timeout", (
                f"{where} accepted the connection but did not answer the TLS handshake within "
                f"{self.connect_timeout:g} s (connect timeout): a server that speaks plain "
                "HTTP on that port waits so; if it does, use an http:// URL"))
        if isinstance(exc, ssl.SSLError) and exc.reason in _NOT_TLS_REASONS:
            return NotTLSError("connect_error", (
                f"{where} does not speak TLS: it answered the TLS handshake with something "
                "else (plain HTTP?); use an http:// URL"))
        return None

    def unread_bytes(self) -> int:
        """Received bytes waiting unread in every open connection (the loop is behind)."""
        return sum(c.unread_bytes() for c in list(self._opened))

    async def warm(self, count: int) -> None:
        """Open connections until `count` are idle, so no request pays for a handshake, and
        pick those that date their first reads for the pass (every k-th, FIRST_READS_DATED;
        as do the connections opened later in it, by the order they open).

        Best effort: a connection that fails to open is left for the request that needs it
        to open again, and to record the failure as its own error.
        """
        self._idle = [c for c in self._idle if not c.closed]
        missing = count - len(self._idle)
        if missing > 0:
            opened = await asyncio.gather(
                *(self._open() for _ in range(missing)), return_exceptions=True
            )
            self._idle += [c for c in opened if isinstance(c, _Connection)]
        self._date_every = max(1, count // FIRST_READS_DATED)
        for i, conn in enumerate(self._idle):
            conn.dates_first_read = i % self._date_every == 0
        self._opened_count = len(self._idle)

    async def acquire(self, fresh: bool = False) -> _Connection:
        """An idle connection, or a new one (always new when `fresh`)."""
        while self._idle and not fresh:
            conn = self._idle.pop()
            if not conn.closed:
                conn.pooled = True
                return conn
        return await self._open()

    def release(self, conn: _Connection) -> None:
        if not conn.closed and conn.exchange is None:
            self._idle.append(conn)

    def close(self) -> None:
        for conn in self._idle:
            conn.abort()
        self._idle.clear()


class _Watchdog:
    """Ends an exchange at the request deadline, or when tokens stop for `stall_s` after the
    first one. The stall timer is re-armed lazily from the last token's time, so a chunk
    costs nothing; the wait for the first token (queueing) is bounded by the deadline only.
    """

    __slots__ = ("_conn", "_ex", "_loop", "_request", "_stall", "_stall_s")

    def __init__(
        self, loop: asyncio.AbstractEventLoop, conn: _Connection, ex: _Exchange,
        deadline: float, request_timeout: float, stall_s: float | None,
    ) -> None:
        self._loop = loop
        self._conn = conn
        self._ex = ex
        self._stall_s = stall_s
        message = f"no complete response within {request_timeout:g} s (request timeout)"
        self._request = loop.call_at(deadline, self._expire, "request_timeout", message)
        self._stall = loop.call_later(stall_s, self._check_stall) if stall_s else None

    def _check_stall(self) -> None:
        assert self._stall_s is not None
        stream = self._ex.stream
        wait_s = self._stall_s
        if stream.chunks:
            left_ns = stream.last_ns + int(self._stall_s * 1e9) - time.perf_counter_ns()
            if left_ns <= 0:
                self._expire("stall_timeout", f"no token for {self._stall_s:g} s after token "
                             f"chunk {stream.chunks} (stall timeout)")
                return
            wait_s = left_ns / 1e9
        self._stall = self._loop.call_later(wait_s, self._check_stall)

    def _expire(self, kind: str, message: str) -> None:
        self._conn.abort()
        self._ex.finish((kind, message))

    def cancel(self) -> None:
        self._request.cancel()
        if self._stall is not None:
            self._stall.cancel()


def build_request(endpoint: Endpoint, payload: dict, request_id: str) -> bytes:
    """The whole HTTP request as one buffer, so it leaves in a single write."""
    body = json.dumps(payload, separators=(",", ":")).encode()
    headers = [
        f"POST {endpoint.completion_path} HTTP/1.1",
        f"Host: {endpoint.authority}",
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
    request_timeout: float,
    stall_timeout: float | None = None,
    keep_text: bool = False,
) -> RequestRecord:
    """Send one prepared request and fill `record` with what the stream showed (with
    `keep_text`, `record.reply` is the answer's text). The record keeps each chunk's arrival
    and tokens, from which the store works out its inter-token figures.

    `request_timeout` bounds the whole request; `stall_timeout` (None: off) the gap between
    tokens after the first. A pooled keep-alive connection that closes before any byte of the
    answer (the server's idle timeout met the request) is re-sent once on a fresh connection,
    and `record.retried` keeps the first error's kind: a server that crashes on receipt of
    every request shows as that, never as healthy.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + request_timeout
    for attempt in (0, 1):
        try:
            conn = await pool.acquire(fresh=attempt == 1)
        except OSError as exc:  # TimeoutError included
            record.sent_at = clock.wall(time.perf_counter_ns())
            record.error_kind, record.error_message = _connect_failure(exc, pool.connect_timeout)
            return record
        exchange = _Exchange(loop.create_future(), keep_text=keep_text)
        sent_ns = conn.send(exchange, request)
        await _wait(conn, exchange, _Watchdog(
            loop, conn, exchange, deadline, request_timeout, stall_timeout))
        error = exchange.error
        stale = (error is not None and error[0] == "dropped" and conn.pooled
                 and not exchange.received)
        if stale and attempt == 0:
            record.retried = "dropped"
            continue
        pool.release(conn)
        break
    _note_first_read(exchange)
    _fill(record, exchange, clock, sent_ns, exchange.end_ns)
    if record.retried and record.error_message:
        record.error_message += f" (on the re-send; the first attempt ended {record.retried})"
    return record


async def get(endpoint: Endpoint, path: str, timeout: float) -> Response:
    """GET `path` on a fresh connection like the sweep's, for control-plane calls.

    `timeout` bounds the connect and the whole request; WireError says what failed.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    pool = ConnectionPool(endpoint, connect_timeout=timeout)
    try:
        conn = await pool.acquire()
    except OSError as exc:
        raise WireError(*_connect_failure(exc, timeout)) from None
    headers = [f"GET {path} HTTP/1.1", f"Host: {endpoint.authority}", "Accept: */*",
               "Accept-Encoding: identity", "Connection: close"]
    headers += [f"{k}: {v}" for k, v in endpoint.auth_headers().items()]
    exchange = _Exchange(loop.create_future(), events=False, body_limit=_GET_BODY_LIMIT)
    conn.send(exchange, ("\r\n".join(headers) + "\r\n\r\n").encode())
    try:
        await _wait(conn, exchange, _Watchdog(loop, conn, exchange, deadline, timeout, None))
    finally:
        conn.abort()
    if exchange.error is not None:
        raise WireError(*exchange.error)
    return Response(exchange.parser.status, exchange.parser.headers, bytes(exchange.body))


async def _wait(conn: _Connection, exchange: _Exchange, watchdog: _Watchdog) -> None:
    """Await the exchange; a cancelled wait leaves no open connection or timer behind."""
    try:
        await exchange.future
    except asyncio.CancelledError:
        conn.abort()
        raise
    finally:
        watchdog.cancel()


def _fill(
    record: RequestRecord, ex: _Exchange, clock: Clock, sent_ns: int, end_ns: int
) -> None:
    stream = ex.stream
    record.sent_at = clock.wall(sent_ns)
    record.latency_ms = (end_ns - sent_ns) / 1e6
    record.chunks = stream.chunks
    record.finish_reason = stream.finish_reason
    record.input_tokens = stream.prompt_tokens
    record.cached_tokens = stream.cached_tokens
    if stream.text is not None:
        record.reply = "".join(stream.text)
    times = stream.times_ns
    if times:
        record.ttft_ms = (times[0] - sent_ns) / 1e6
    if stream.completion_tokens is not None:
        record.output_tokens = stream.completion_tokens
    else:
        record.output_tokens = stream.chunks
        record.output_tokens_estimated = True
    record.figures = stream.reasoning_figures(sent_ns, end_ns, record.output_tokens)
    # the inter-token figures are worked out by the results writer's process, off this loop
    record.chunk_offsets_ns = [t - sent_ns for t in times]
    record.chunk_tokens = stream.chunk_tokens
    status = ex.parser.status
    if status:
        record.http_status = status
    if ex.error is not None:
        record.error_kind, record.error_message = ex.error
    elif not 200 <= status < 300:
        record.error_kind = "http_error"
        record.error_message = _error_message(status, bytes(ex.body))
    elif not ex.events:
        record.error_kind = "malformed"
        record.error_message = _not_a_stream(ex.parser, bytes(ex.body))
    elif not stream.chunks and not record.output_tokens:  # [DONE] first, or a body cut short
        record.error_kind = "malformed"
        record.error_message = "the stream ended without a token"


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


def _not_a_stream(parser: ResponseParser, body: bytes) -> str:
    """A 2xx that is not SSE (a non-streaming server or a proxy's page) is no success."""
    content_type = parser.headers.get("content-type") or "no Content-Type"
    preview = body.decode("utf-8", "replace")[:_PREVIEW_CHARS]
    return (f"HTTP {parser.status} answered with {content_type}, not text/event-stream; "
            f"body starts: {preview!r}")


def _connect_failure(exc: OSError, timeout: float) -> tuple[str, str]:
    """The error kind and one-line message for a connection that did not open."""
    if isinstance(exc, NotTLSError):
        return exc.kind, str(exc)
    if isinstance(exc, TimeoutError):
        return "connect_timeout", f"no connection within {timeout:g} s (connect timeout)"
    if isinstance(exc, ssl.SSLCertVerificationError):
        return "connect_error", f"TLS certificate verification failed: {exc.verify_message}"
    if isinstance(exc, ConnectionRefusedError):
        return "connect_error", "connection refused"
    if isinstance(exc, socket.gaierror):
        return "connect_error", f"host name not resolved ({exc.strerror})"
    return "connect_error", _describe(exc)


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
