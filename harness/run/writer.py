"""Commits finished rounds from a separate process, so no database work touches the clock.

Opening and closing the DuckDB file for each round (so readers get in between) costs ~25 ms
of CPU in DuckDB 2.x. In a thread that would hold the GIL next to the event loop that
timestamps chunks; in its own process it costs the measurement nothing.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import signal
from pathlib import Path

from harness.records import RequestRecord
from harness.results.store import Store

_POLL_S = 0.5


def _serve(db_path: str, lock_timeout_s: float, run_id: str, inbox: mp.Queue, acks: mp.Queue,
           parent: int) -> None:
    """Child process: write each batch, ack it; exit when told or when the parent died."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    store = Store(Path(db_path), lock_timeout_s)
    while True:
        try:
            batch = inbox.get(timeout=_POLL_S)
        except queue.Empty:
            if os.getppid() != parent:  # parent killed: what was queued is written, so stop
                return
            continue
        if batch is None:
            return
        try:
            store.write_requests(run_id, batch)
            acks.put(None)
        except Exception as exc:
            acks.put(str(exc) or type(exc).__name__)


class WriterError(RuntimeError):
    """A round could not be written; the message is one sentence."""


class BackgroundWriter:
    """`submit` a finished round; `drain` waits until every submitted round is on disk."""

    def __init__(self, store: Store, run_id: str) -> None:
        ctx = mp.get_context("spawn")
        self._inbox: mp.Queue = ctx.Queue()
        self._acks: mp.Queue = ctx.Queue()
        self._pending = 0
        self._error: str | None = None
        self._proc = ctx.Process(
            target=_serve, name="round-writer", daemon=True,
            args=(str(store.path), store.lock_timeout_s, run_id, self._inbox, self._acks,
                  os.getpid()),
        )
        self._proc.start()

    def submit(self, records: list[RequestRecord]) -> None:
        self._inbox.put(records)
        self._pending += 1

    def drain(self) -> None:
        """Block until the writer acknowledged every batch; raise the first write error."""
        while self._pending:
            try:
                error = self._acks.get(timeout=_POLL_S)
            except queue.Empty:
                if not self._proc.is_alive():
                    raise WriterError("the results writer process died") from None
                continue
            self._pending -= 1
            self._error = self._error or error
        if self._error:
            raise WriterError(f"results could not be stored: {self._error}")

    def close(self) -> None:
        """Write what is queued, then stop the writer process."""
        try:
            self.drain()
        finally:
            self._inbox.put(None)
            self._proc.join(30)
            if self._proc.is_alive():
                self._proc.kill()
