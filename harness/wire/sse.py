"""Server-sent events framing: body bytes in, `data:` payloads out (comments dropped)."""

from __future__ import annotations

from harness.wire.completion_stream import StreamFault

MAX_EVENT_BYTES = 16 * 2**20  # an event this long without its blank line is no event stream


class SSEDecoder:
    """Incremental decoder for events split across reads at any byte.

    Lines end in LF, CRLF or CR; a CR that ends one read and the LF that starts the next are
    one line break, not two (two would end the event early).
    """

    __slots__ = ("_buf", "_cr", "comments")

    def __init__(self) -> None:
        self._buf = b""
        self._cr = False  # the last read ended in CR: an LF first in the next belongs to it
        self.comments = 0  # keep-alive lines such as ": ping"

    def feed(self, data: bytes) -> list[bytes]:
        if not data:
            return []
        if (not self._buf and not self._cr and data.startswith(b"data: ")
                and data.find(b"\n") == len(data) - 2 and data.endswith(b"\n\n")
                and b"\r" not in data):  # one whole one-line event, as a token's read is
            return [data[6:-2]]
        if self._cr and data[:1] == b"\n":
            data = data[1:]
        self._cr = data[-1:] == b"\r"
        if b"\r" in data:
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        buf = self._buf + data if self._buf else data
        blocks = buf.split(b"\n\n")
        self._buf = blocks.pop()
        if len(self._buf) > MAX_EVENT_BYTES:  # bounded memory against an endless line
            raise StreamFault("malformed", f"an event ran past {MAX_EVENT_BYTES // 2**20} MiB "
                                           "without ending")
        events: list[bytes] = []
        for block in blocks:
            if not block:
                continue
            payload = self._data_of(block)
            if payload is not None:
                events.append(payload)
        return events

    def _data_of(self, block: bytes) -> bytes | None:
        """The spec strips exactly one space after the colon; a bare `data` line is empty."""
        if block.startswith(b"data:") and b"\n" not in block:  # the common one-line event
            return block[6:] if block[5:6] == b" " else block[5:]
        lines = []
        for line in block.split(b"\n"):
            if line.startswith(b":"):
                self.comments += 1
            elif line.startswith(b"data:"):
                lines.append(line[6:] if line[5:6] == b" " else line[5:])
            elif line == b"data":
                lines.append(b"")
        return b"\n".join(lines) if lines else None
