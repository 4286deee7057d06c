"""--request-log: one JSON line per finished request, so a client's own timings can be graded
against what the server saw (times: time.monotonic() seconds, see latency.py)."""

from __future__ import annotations

import json
from pathlib import Path


class RequestLog:
    """Appends line-buffered: one small write per request from the event loop, no thread."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = path.open("a", buffering=1, encoding="utf-8")

    def write(self, record: dict) -> None:
        self._file.write(json.dumps(record, separators=(",", ":")) + "\n")

    def close(self) -> None:
        self._file.close()
