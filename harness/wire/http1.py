"""Incremental HTTP/1.1 response parser: status, headers, then body bytes as they arrive.

Pure (no I/O) so the streaming client can feed it straight from `data_received` and the
tests can feed it any split of the bytes a server might send.
"""

from __future__ import annotations


class ProtocolError(ValueError):
    """The peer sent bytes that are not a valid HTTP/1.1 response."""


_HEAD_LIMIT = 64 * 1024
_HEX_DIGITS = frozenset(b"0123456789abcdefABCDEF")  # int(x, 16) also takes "-5", "0x5", "1_0"


def _one_whole_chunk(data: bytes) -> bytes | None:
    """The data of `data` when it is exactly one whole chunk with data, as a streamed token's
    read usually is (the timing loop's commonest step, taken without the buffer); else None,
    and the general steps take it."""
    end = data.find(b"\r\n", 0, 18)
    if end <= 0 or not _HEX_DIGITS.issuperset(data[:end]):  # an extension or odd size line
        return None
    start = end + 2
    size = int(data[:end], 16)
    if size == 0 or len(data) != start + size + 2 or not data.endswith(b"\r\n"):
        return None
    return data[start:start + size]


class ResponseParser:
    """Feed raw bytes; get body bytes back. `done` turns true when the response is complete."""

    __slots__ = (
        "_body_left",
        "_buf",
        "_chunk_left",
        "_mode",
        "_state",
        "done",
        "headers",
        "keep_alive",
        "status",
    )

    def __init__(self) -> None:
        self._buf = bytearray()
        self._state = "head"  # head | body | chunk_size | chunk_data | chunk_crlf | trailer
        self._mode = ""  # chunked | length | close
        self._body_left = 0
        self._chunk_left = 0
        self.status = 0
        self.headers: dict[str, str] = {}
        self.keep_alive = True
        self.done = False

    def feed(self, data: bytes) -> bytes:
        """Consume `data` and return the body bytes it completed (possibly empty)."""
        if self._state == "body" and self._mode == "close":
            return data
        if self._state == "chunk_size" and not self._buf:
            body = _one_whole_chunk(data)
            if body is not None:
                return body
        self._buf += data
        out = bytearray()
        while not self.done:
            progressed = self._step(out)
            if not progressed:
                break
        return bytes(out)

    def feed_eof(self) -> None:
        """The connection closed: only a close-delimited body may end this way."""
        if self._state == "body" and self._mode == "close":
            self.done = True
            self.keep_alive = False

    def _step(self, out: bytearray) -> bool:
        buf = self._buf
        state = self._state
        if state == "head":
            end = buf.find(b"\r\n\r\n")
            if end < 0:
                if len(buf) > _HEAD_LIMIT:
                    raise ProtocolError("response headers exceed 64 KiB")
                return False
            self._parse_head(bytes(buf[:end]))
            del buf[: end + 4]
            return True
        if state == "body" and self._mode == "close":
            out += buf
            del buf[:]
            return False
        if state == "body":  # content-length
            take = min(self._body_left, len(buf))
            out += buf[:take]
            del buf[:take]
            self._body_left -= take
            if self._body_left == 0:
                self.done = True
            return take > 0 or self.done
        if state == "chunk_size":
            end = buf.find(b"\r\n")
            if end < 0:
                if len(buf) > 1024:
                    raise ProtocolError("chunk size line too long")
                return False
            size_text = bytes(buf[:end]).split(b";", 1)[0].strip()
            if not size_text or not _HEX_DIGITS.issuperset(size_text):
                raise ProtocolError(f"bad chunk size {size_text[:20]!r}")
            size = int(size_text, 16)
            start = end + 2
            if size and buf[start + size:start + size + 2] == b"\r\n":  # the chunk is whole
                out += buf[start:start + size]  # (a stream's usual case: one step, one cut)
                del buf[:start + size + 2]
                return True
            self._chunk_left = size
            del buf[:start]
            self._state = "chunk_data" if size else "trailer"
            return True
        if state == "chunk_data":
            if not buf:
                return False
            take = min(self._chunk_left, len(buf))
            out += buf[:take]
            del buf[:take]
            self._chunk_left -= take
            if self._chunk_left == 0:
                self._state = "chunk_crlf"
            return True
        if state == "chunk_crlf":
            if len(buf) < 2:
                return False
            if buf[:2] != b"\r\n":
                raise ProtocolError("chunk not followed by CRLF")
            del buf[:2]
            self._state = "chunk_size"
            return True
        if state == "trailer":
            end = buf.find(b"\r\n")
            if end < 0:
                return False
            del buf[: end + 2]
            if end == 0:
                self.done = True
            return True
        return False

    def _parse_head(self, head: bytes) -> None:
        """Interim 1xx heads (100 Continue, 103 Early Hints) are skipped: the state stays
        `head` and `status` stays 0 until the final response's head."""
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1."):
            raise ProtocolError(f"not an HTTP/1.x status line: {lines[0][:60]!r}")
        if len(parts[1]) != 3 or not parts[1].isdigit() or parts[1][0] == "0":
            raise ProtocolError(f"bad status code {parts[1][:10]!r}")
        status = int(parts[1])
        if status == 101:
            raise ProtocolError("101 Switching Protocols to a request that asked for no upgrade")
        if 100 <= status < 200:
            return
        self.status = status
        for line in lines[1:]:
            name, sep, value = line.partition(":")
            if sep:
                self.headers[name.strip().lower()] = value.strip()
        connection = self.headers.get("connection", "").lower()
        self.keep_alive = parts[0] == "HTTP/1.1" and connection != "close"
        if self.status in (204, 304):
            self.done = True
        elif "chunked" in self.headers.get("transfer-encoding", "").lower():
            self._mode, self._state = "chunked", "chunk_size"
        elif "content-length" in self.headers:
            length = self.headers["content-length"]
            if not (length.isascii() and length.isdigit()):  # int() also takes "-5", "1_0"
                raise ProtocolError(f"bad content-length {length[:20]!r}")
            self._body_left = int(length)
            self._mode, self._state = "length", "body"
            self.done = self._body_left == 0
        else:
            self._mode, self._state = "close", "body"
            self.keep_alive = False
