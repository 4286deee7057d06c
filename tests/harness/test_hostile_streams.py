"""Streams a careful client must survive: each served by a hostile server (CannedServer) and
judged on what it is, never counted as a healthy answer it was not."""

from __future__ import annotations

import pytest

from tests.harness.fixtures import CannedServer
from tests.harness.test_wire import delta, send

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
