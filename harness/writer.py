"""Commits finished rounds from a background thread so the event loop never waits on disk."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable

from harness.records import RequestRecord

Write = Callable[[list[RequestRecord]], None]


class BackgroundWriter:
    """A single writer thread; `drain()` waits until every submitted round is on disk."""

    def __init__(self, write: Write) -> None:
        self._write = write
        self._queue: queue.Queue[list[RequestRecord] | None] = queue.Queue()
        self._error: BaseException | None = None
        self.written = 0
        self._thread = threading.Thread(target=self._loop, name="round-writer", daemon=True)
        self._thread.start()

    def submit(self, records: list[RequestRecord]) -> None:
        if self._error is not None:
            raise self._error
        self._queue.put(records)

    def _loop(self) -> None:
        while (records := self._queue.get()) is not None:
            try:
                if self._error is None:
                    self._write(records)
                    self.written += len(records)
            except BaseException as exc:  # surfaced to the sweep at the next submit/drain
                self._error = exc
            finally:
                self._queue.task_done()
        self._queue.task_done()

    def drain(self) -> None:
        self._queue.join()
        if self._error is not None:
            raise self._error

    def close(self) -> None:
        """Write what is queued, stop the thread; raises the first write error, if any."""
        self._queue.put(None)
        self._thread.join()
        if self._error is not None:
            raise self._error
