import pytest

from harness.wire.http1 import ProtocolError, ResponseParser
from tests.harness.fixtures import splits

CHUNKED = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"6\r\nhello \r\n5;ext=1\r\nworld\r\n0\r\nX-Trailer: a\r\n\r\n"
)


def feed_in_pieces(data: bytes, size: int) -> tuple[ResponseParser, bytes]:
    parser = ResponseParser()
    body = b""
    for i in range(0, len(data), size):
        body += parser.feed(data[i : i + size])
    return parser, body


@pytest.mark.parametrize("size", [1, 2, 3, 7, 64, 4096])
def test_chunked_body_survives_any_split(size):
    parser, body = feed_in_pieces(CHUNKED, size)
    assert body == b"hello world"
    assert parser.done and parser.status == 200 and parser.keep_alive


def test_content_length_body_and_close_header():
    data = b"HTTP/1.1 500 Internal\r\nContent-Length: 5\r\nConnection: close\r\n\r\noops!"
    parser, body = feed_in_pieces(data, 4)
    assert (parser.status, body, parser.done, parser.keep_alive) == (500, b"oops!", True, False)


def test_close_delimited_body_ends_at_eof():
    parser = ResponseParser()
    body = parser.feed(b"HTTP/1.0 200 OK\r\n\r\nabc") + parser.feed(b"def")
    assert body == b"abcdef" and not parser.done
    parser.feed_eof()
    assert parser.done and not parser.keep_alive


def test_eof_inside_chunked_body_is_not_done():
    parser = ResponseParser()
    parser.feed(CHUNKED[:-20])
    parser.feed_eof()
    assert not parser.done


@pytest.mark.parametrize(
    "data",
    [b"SSH-2.0-OpenSSH\r\n\r\n", b"HTTP/1.1 abc OK\r\n\r\n", b"HTTP/1.1 099 Low\r\n\r\n",
     b"HTTP/1.1 2000 Long\r\n\r\n",
     b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
     # a length int() reads but HTTP does not: negative, signed, 0x-prefixed, underscored
     b"HTTP/1.1 200 OK\r\nContent-Length: -5\r\n\r\n",
     b"HTTP/1.1 200 OK\r\nContent-Length: +5\r\n\r\nhello",
     b"HTTP/1.1 200 OK\r\nContent-Length: 1_0\r\n\r\n",
     b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-5\r\n",
     b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0x5\r\nhello\r\n"],
)
def test_garbage_is_a_protocol_error(data):
    with pytest.raises(ProtocolError):
        ResponseParser().feed(data)


def feed_all(pieces: list[bytes]) -> tuple[ResponseParser, bytes]:
    parser = ResponseParser()
    return parser, b"".join(parser.feed(piece) for piece in pieces)


INTERIM = (
    b"HTTP/1.1 100 Continue\r\n\r\n"
    b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"
)


def test_interim_1xx_heads_are_skipped_however_the_bytes_arrive():
    for pieces in splits(INTERIM + CHUNKED):
        parser, body = feed_all(pieces)
        assert (parser.status, body, parser.done) == (200, b"hello world", True)
        assert "link" not in parser.headers  # only the final head's headers are kept
        assert parser.headers["content-type"] == "text/event-stream"


def test_only_interim_heads_leave_the_response_open():
    parser, body = feed_all([INTERIM])
    assert (parser.status, body, parser.done) == (0, b"", False)


def test_switching_protocols_unasked_is_a_protocol_error():
    with pytest.raises(ProtocolError, match="101"):
        ResponseParser().feed(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: h2c\r\n\r\n")


HEAD = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"


@pytest.mark.parametrize("read", [
    b"6\r\nhello \r\n", b"A\r\n0123456789\r\n", b"a\r\n0123456789\r\n", b"5;ext=1\r\nworld\r\n",
    b"5\r\nhel\r\n\r\n", b"3\r\nabc\r\n4\r\ndefg\r\n", b"0\r\n\r\n", b"5\r\nhelloX\r\n",
    b"5\r\nhello", b"-5\r\nhello\r\n", b"0x5\r\nhello\r\n", b"00005\r\nhello\r\n"])
def test_a_read_of_one_whole_chunk_is_taken_as_any_split_of_it(read):
    """A token's read is usually one whole chunk, parsed in one step: it must give the body
    (or the error) that the same bytes give a byte at a time."""
    def outcome(pieces: list[bytes]) -> tuple[bytes, bool] | str:
        parser = ResponseParser()
        parser.feed(HEAD)
        try:
            return b"".join(parser.feed(piece) for piece in pieces), parser.done
        except ProtocolError as exc:
            return str(exc)
    assert outcome([read]) == outcome([read[i:i + 1] for i in range(len(read))])
