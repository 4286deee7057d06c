"""The streaming client against real sockets: what each stream shape stores.

Every test reads the record `stream_completion` fills, so the kind, status and figures are the
ones a sweep would store.
"""

import asyncio
import socket
from collections.abc import Iterator

import pytest

from harness.mock_server import MockConfig, ThreadedMockServer
from harness.run import aio
from harness.wire import target
from harness.wire.client import (
    ConnectionPool,
    WireError,
    _Connection,
    _Exchange,
    get,
)
from harness.wire.endpoint import Endpoint
from tests.harness.fixtures import CannedServer, delta, send


def sse_response(*events: bytes) -> bytes:
    body = b"".join(b"data: " + e + b"\n\n" for e in events) + b"data: [DONE]\n\n"
    return (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body))


# --- no silent retry -------------------------------------------------------------------------

def test_a_stale_pooled_connection_is_resent_and_the_retry_recorded(mock_server):
    # the second request on a connection is read, then the connection closed unanswered
    mock_server.configure(keepalive_requests=1)
    first, second = send(mock_server.url, "a", "b")
    assert first.ok and first.retried is None
    assert second.ok and second.retried == "dropped" and second.output_tokens == 8
    assert mock_server.server.requests_seen == 2


def test_a_server_that_crashes_on_receipt_is_recorded_not_hidden(mock_server):
    mock_server.configure(fault="close_on_receipt", fault_match="crash")
    ok, crashed = send(mock_server.url, "fine", "crash")  # "crash" goes on a pooled connection
    assert ok.ok
    assert (crashed.error_kind, crashed.retried, crashed.chunks) == ("dropped", "dropped", 0)
    assert "first attempt ended dropped" in crashed.error_message
    [fresh] = send(mock_server.url, "crash")  # a fresh connection is never re-sent
    assert (fresh.error_kind, fresh.retried) == ("dropped", None)


# --- what a 200 must be ----------------------------------------------------------------------

def test_a_200_that_is_not_an_event_stream_is_malformed(mock_server):
    mock_server.configure(fault="not_sse")
    [rec] = send(mock_server.url, "r")
    assert (rec.error_kind, rec.http_status, rec.chunks, rec.ttft_ms) == ("malformed", 200, 0, None)
    assert "answered with application/json, not text/event-stream" in rec.error_message
    assert "body starts: '{\"id\": \"cmpl-mock\"" in rec.error_message


def test_interim_1xx_before_the_stream_is_skipped():
    pieces = [b"HTTP/1.1 100 Continue\r\n\r\n", sse_response(delta("a"), delta("b"))]
    with CannedServer(pieces) as server:
        [rec] = send(server.url, "r")
    assert rec.ok and (rec.http_status, rec.chunks) == (200, 2)


def test_a_crlf_split_between_two_reads_keeps_a_multiline_event_whole():
    event = b'data: {"choices":[{"index":0,\r\ndata: "delta":{"content":"a"}}]}\r\n\r\n'
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
    cut = event.index(b"\r\n") + 1  # the CR ends one read, the LF starts the next
    with CannedServer([head + event[:cut], event[cut:], b"data: [DONE]\r\n\r\n"]) as server:
        [rec] = send(server.url, "r")
    assert rec.ok and rec.chunks == 1


@pytest.mark.parametrize("bad", [
    b'{"choices":[{"index":0,"delta":"a"}]}', b'{"choices":["a"]}',
    b'{"choices":[],"usage":"lots"}',
])
def test_non_object_fields_are_malformed_not_dropped(bad):
    with CannedServer([sse_response(delta("a"), bad)]) as server:
        [rec] = send(server.url, "r")
    assert (rec.error_kind, rec.chunks) == ("malformed", 1)
    assert "is not an object" in rec.error_message


# --- IPv6 ------------------------------------------------------------------------------------

def _has_ipv6_loopback() -> bool:
    try:
        with socket.create_server(("::1", 0), family=socket.AF_INET6):
            return True
    except OSError:
        return False


needs_ipv6 = pytest.mark.skipif(not _has_ipv6_loopback(), reason="no IPv6 loopback here")


@needs_ipv6
def test_ipv6_literal_host_header_on_the_wire():
    with CannedServer([sse_response(delta("a"))], host="::1") as server:
        [rec] = send(server.url, "r")
    assert rec.ok
    assert f"\r\nHost: [::1]:{server.port}\r\n".encode() in server.heads[0]


@needs_ipv6
def test_ipv6_target_streams_and_answers_the_preflight():
    with ThreadedMockServer(MockConfig(ttft_ms=1, itl_ms=1), host="::1") as server:
        ep = Endpoint(server.url)
        info = aio.run(target.describe(ep, None))
        [rec] = send(server.url, "r")
        stats = aio.run(target.fetch_stats(ep))  # /stats at server_root, brackets kept
    assert (info.model, info.engine) == ("mock-model", "mock")
    assert rec.ok and rec.output_tokens == 8
    assert stats == {"requests": 1, "tokens": 8}


# --- timeouts --------------------------------------------------------------------------------

def test_a_stall_after_the_first_token_is_a_stall_timeout(mock_server):
    mock_server.configure(fault="stall", fault_after_chunks=2, stall_s=30)
    [rec] = send(mock_server.url, "r", stall_timeout=0.3)
    assert (rec.error_kind, rec.chunks) == ("stall_timeout", 2)
    assert "no token for 0.3 s after token chunk 2" in rec.error_message
    assert 300 <= rec.latency_ms - rec.ttft_ms < 3000


def test_a_long_wait_for_the_first_token_is_bounded_by_the_request_timeout_only(mock_server):
    mock_server.configure(ttft_ms=600)  # queueing longer than the stall timeout is no stall
    [rec] = send(mock_server.url, "r", stall_timeout=0.2, request_timeout=5)
    assert rec.ok and rec.ttft_ms >= 600 and rec.output_tokens == 8


def test_a_healthy_stream_longer_than_the_request_timeout_is_a_request_timeout(mock_server):
    mock_server.configure(itl_ms=20)  # 40 tokens: ~0.8 s, no gap near the stall timeout
    [rec] = send(mock_server.url, "r", output_tokens=40, request_timeout=0.3, stall_timeout=0.2)
    assert rec.error_kind == "request_timeout" and 0 < rec.chunks < 40
    assert "no complete response within 0.3 s (request timeout)" in rec.error_message
    assert rec.latency_ms == pytest.approx(300, abs=150)


@pytest.fixture
def full_backlog() -> Iterator[str]:
    """A listener that never accepts, its queue filled: a new connect hangs in SYN_SENT."""
    server = socket.create_server(("127.0.0.1", 0), backlog=0)
    port = server.getsockname()[1]
    queued = []
    for _ in range(3):
        sock = socket.socket()
        sock.setblocking(False)
        try:
            sock.connect(("127.0.0.1", port))
        except BlockingIOError:
            pass
        queued.append(sock)
    yield f"http://127.0.0.1:{port}/v1"
    for sock in queued:
        sock.close()
    server.close()


def test_a_connect_that_hangs_is_a_connect_timeout(full_backlog):
    ep = Endpoint(full_backlog)
    [rec] = send(full_backlog, "r", pool=ConnectionPool(ep, connect_timeout=0.3))
    assert rec.error_kind == "connect_timeout"
    assert rec.error_message == "no connection within 0.3 s (connect timeout)"
    with pytest.raises(WireError) as info:
        aio.run(get(ep, "/v1/models", 0.3))
    assert info.value.kind == "connect_timeout"


def test_a_refused_connect_is_a_connect_error_even_after_warming():
    with socket.create_server(("127.0.0.1", 0)) as sock:
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
    pool = ConnectionPool(Endpoint(url))
    aio.run(pool.warm(2))  # failures are left to the requests to record
    [rec] = send(url, "r", pool=pool)
    assert (rec.error_kind, rec.error_message) == ("connect_error", "connection refused")


# --- agent traffic ---------------------------------------------------------------------------

def test_tool_call_deltas_start_ttft(mock_server):
    mock_server.configure(tool_calls=True, ttft_ms=30)
    [rec] = send(mock_server.url, "r")
    assert rec.ok and rec.chunks == 8 and rec.output_tokens == 8
    assert rec.finish_reason == "tool_calls"
    assert rec.ttft_ms is not None and rec.ttft_ms >= 30


# --- one route -------------------------------------------------------------------------------

def test_the_preflight_get_uses_the_sweep_connection_code(mock_server):
    resp = aio.run(get(Endpoint(mock_server.url), "/v1/models", 5))
    assert resp.status == 200 and resp.headers["content-type"] == "application/json"
    assert b'"mock-model"' in resp.body



class _ClosingTransport:
    """A transport the server has just closed: uvloop's write() would raise on it."""

    written = b""

    def get_extra_info(self, name: str) -> None:
        return None

    def is_closing(self) -> bool:
        return True

    def write(self, data: bytes) -> None:
        raise RuntimeError("unable to perform operation on a closed transport")


def test_a_connection_closed_before_the_send_ends_the_request_dropped():
    """A server that dies between requests closed a pooled connection under the harness:
    the request is `dropped` (and re-sent once when pooled), not an exception in the run."""
    async def scenario() -> _Exchange:
        conn = _Connection()
        conn.connection_made(_ClosingTransport())  # type: ignore[arg-type]
        exchange = _Exchange(asyncio.get_running_loop().create_future())
        conn.send(exchange, b"GET / HTTP/1.1\r\n\r\n")
        await asyncio.wait_for(exchange.future, 1)
        return exchange

    exchange = asyncio.run(scenario())
    assert exchange.error is not None and exchange.error[0] == "dropped"
