"""Streams a careful client must survive: each served by a hostile server (CannedServer) and
judged on what it is, never counted as a healthy answer it was not."""

from __future__ import annotations

import time

import pytest

from tests.harness.fixtures import CannedServer, delta, send

HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"


def event(data: bytes) -> bytes:
    return b"data: " + data + b"\n\n"


def sized(body: bytes, length: int | None = None) -> list[bytes]:
    """One response whose Content-Length is `length` (default: the body's own)."""
    return [HEAD + b"Content-Length: %d\r\n\r\n" % (len(body) if length is None else length)
            + body]


TWO = event(delta("a")) + event(delta("b"))
CASES = {
    "done first": (sized(event(b"[DONE]") + event(delta("b")) * 16), "malformed", 0),
    "data after done": (sized(event(delta("a")) + event(b"[DONE]") + event(delta("b")) * 16),
                        None, 1),
    "an endless line": ([HEAD + b"Transfer-Encoding: chunked\r\n\r\n",
                         *[b"%x\r\n%s\r\n" % (2**20, b"x" * 2**20)] * 18], "malformed", 0),
    "invalid UTF-8": (sized(event(b'{"choices":[{"index":0,"delta":{"content":"\xff\xfe"}}]}')
                            + event(b"[DONE]")), "malformed", 0),
    "Content-Length short of the body": (sized(TWO + event(b"[DONE]"), length=10),
                                         "malformed", 0),
    "Content-Length past the body": (sized(TWO, length=100_000), "dropped", 2),
    "a negative Content-Length": (sized(TWO + event(b"[DONE]"), length=-5), "malformed", 0),
}


@pytest.mark.parametrize("case", CASES)
def test_a_hostile_stream_is_stored_as_what_it_is(case):
    pieces, kind, chunks = CASES[case]
    with CannedServer(pieces) as server:
        [record] = send(server.url, "r", request_timeout=30)
    assert record.error_kind == kind, record.error_message
    assert record.chunks == chunks
    if record.ok:
        assert record.output_tokens > 0 and record.ttft_ms is not None


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


CHUNKED = HEAD + b"Transfer-Encoding: chunked\r\n\r\n"
ANSWER = chunk(event(delta("a")) + event(b"[DONE]"))  # a whole answer, the body not ended


def test_the_answer_ends_at_its_done_however_long_the_body_goes_on():
    """E2E ran to the body's end (here 0.5 s of events after [DONE])."""
    with CannedServer([CHUNKED + ANSWER, *[chunk(event(delta("b")))] * 25, b"0\r\n\r\n"]
                      ) as server:
        [record] = send(server.url, "r", request_timeout=30)
    assert record.ok and record.chunks == 1, record.error_message
    assert record.latency_ms < 250, record.latency_ms


@pytest.mark.parametrize("stall_timeout", [0.3, None])
def test_done_then_a_body_that_never_ends_is_a_success(stall_timeout):
    """It was stored as a stall timeout ("no token for 0.3 s"), or as dropped when the server
    closed mid-body; the body is cut off a moment after [DONE] instead."""
    keepalives = [chunk(b": ping\n\n")] * 150  # 3 s, never the body's last chunk
    with CannedServer([CHUNKED + ANSWER, *keepalives]) as server:
        start = time.monotonic()
        [record] = send(server.url, "r", request_timeout=30, stall_timeout=stall_timeout)
        took = time.monotonic() - start
    assert record.ok and record.chunks == 1, record.error_message
    assert record.latency_ms < 250 and took < 2.5, (record.latency_ms, took)
