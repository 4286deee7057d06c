"""Server-sent events framing: body bytes in, `data:` payloads out (comments dropped)."""

from __future__ import annotations


class SSEDecoder:
    """Incremental decoder; handles LF and CRLF line ends and events split across reads."""

    __slots__ = ("_buf", "comments")

    def __init__(self) -> None:
        self._buf = b""
        self.comments = 0  # keep-alive lines such as ": ping"

    def feed(self, data: bytes) -> list[bytes]:
        if b"\r" in data:
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        buf = self._buf + data if self._buf else data
        blocks = buf.split(b"\n\n")
        self._buf = blocks.pop()
        events: list[bytes] = []
        for block in blocks:
            if not block:
                continue
            payload = self._data_of(block)
            if payload is not None:
                events.append(payload)
        return events

    def _data_of(self, block: bytes) -> bytes | None:
        if block.startswith(b"data:") and b"\n" not in block:  # the common one-line event
            return block[5:].lstrip(b" ")
        lines = []
        for line in block.split(b"\n"):
            if line.startswith(b":"):
                self.comments += 1
            elif line.startswith(b"data:"):
                lines.append(line[5:].lstrip(b" ") if line[5:6] == b" " else line[5:])
        return b"\n".join(lines) if lines else None
