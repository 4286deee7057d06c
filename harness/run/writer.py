"""Commits finished rounds from a separate process, so no database work touches the clock.

Opening and closing the DuckDB file for each write (so readers get in between) costs ~25 ms
of CPU in DuckDB 2.x, so the rounds queued meanwhile go in one write. In a thread that work
would hold the GIL next to the event loop that timestamps chunks; in its own process it costs
the measurement nothing.

The run keeps every round until the writer acknowledges it. A writer that dies is started
again and sent what it had not acknowledged (request ids are unique in the file, so a round
it had committed unacknowledged is not stored twice). A round the writer could not store
stops the run at its next round: `unwritten` then holds everything not on disk.
"""

from __future__ import annotations

import asyncio
import math
import multiprocessing as mp
import os
import queue
import signal
import time
from collections.abc import Callable
from pathlib import Path

from common import background, orphaned_queues
from harness.records import RequestRecord
from harness.results.store import Store

_POLL_S = 0.5
_FLUSH_POLL_S = 0.01
_BATCH_ROWS = 2048  # rows at most in one write of queued rounds
MAX_RESTARTS = 3  # deaths in a row, with nothing acknowledged between them


def _serve(db_path: str, lock_timeout_s: float, run_id: str, token_times: bool,
           inbox: mp.Queue, acks: mp.Queue, parent: int) -> None:
    """Child process: write each batch, ack it; exit when told or when the parent died."""
    for signum in (signal.SIGINT, signal.SIGTERM):  # a stop is the parent's to handle (one
        signal.signal(signum, signal.SIG_IGN)  # from a terminal reaches the process group)
    # its INSERTs wait when the timing loop or a server on this host wants the CPU: a round's
    # write ran as the next request went out, and a local server woken onto the writer's CPU
    # read that request 1-2 ms late
    background.step_back()
    store = Store(Path(db_path), lock_timeout_s)
    while True:
        try:
            item = inbox.get(timeout=_POLL_S)
        except queue.Empty:
            if os.getppid() != parent:  # parent killed: what was queued is written, so stop
                orphaned_queues.release(inbox, acks)
                return
            continue
        if item is None:
            return
        seqs, rows, last = _queued(item, inbox)
        try:
            store.write_requests(run_id, rows, token_times)
            error = None
        except Exception as exc:
            error = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        for seq in seqs:
            acks.put((seq, error))
        if last:
            return


def _queued(first: tuple[int, list[RequestRecord]],
            inbox: mp.Queue) -> tuple[list[int], list[RequestRecord], bool]:
    """`first` and the rounds queued behind it, up to _BATCH_ROWS rows, for one transaction
    (a round's own costs ~25 ms, which rounds of a few short requests outrun); and whether
    the end was queued among them."""
    seqs, rows = [first[0]], list(first[1])
    while len(rows) < _BATCH_ROWS:
        try:
            item = inbox.get_nowait()
        except queue.Empty:
            break
        if item is None:
            return seqs, rows, True
        seqs.append(item[0])
        rows += item[1]
    return seqs, rows, False


class WriterError(RuntimeError):
    """A round could not be written; the message is one sentence."""


class BackgroundWriter:
    """`submit` a finished round; `flush` (or `drain`) waits until every one is on disk."""

    def __init__(self, store: Store, run_id: str,
                 on_restart: Callable[[int], None] | None = None,
                 token_times: bool = False) -> None:
        """`on_restart(rows)`: a dead writer was started again and sent `rows` again;
        `token_times`: every chunk's arrival is stored too (`run --token-times`)."""
        self._on_restart = on_restart
        self._ctx = mp.get_context("spawn")
        self._args = (str(store.path), store.lock_timeout_s, run_id, token_times)
        self._unacked: dict[int, list[RequestRecord]] = {}
        self._seq = 0
        self._error: str | None = None
        self._deaths = 0
        self._start()

    def _start(self) -> None:
        """The writer, and multiprocessing's resource tracker with the first queue, start with
        SIGHUP blocked, which they keep: a closed terminal hangs up the whole process group,
        and the run is the parent's to stop (a tracker killed so prints tracebacks at exit).
        The parent gets a SIGHUP sent meanwhile once it is unblocked."""
        blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGHUP})
        try:
            self._inbox: mp.Queue = self._ctx.Queue()
            self._acks: mp.Queue = self._ctx.Queue()
            self._proc = self._ctx.Process(
                target=_serve, name="round-writer", daemon=True,
                args=(*self._args, self._inbox, self._acks, os.getpid()))
            self._proc.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, blocked)

    def submit(self, records: list[RequestRecord]) -> None:
        """Queue a round; raise WriterError if an earlier one could not be stored."""
        self._seq += 1
        self._unacked[self._seq] = records
        self._inbox.put((self._seq, records))
        self._collect()
        self._check()

    @property
    def unwritten(self) -> list[RequestRecord]:
        """Every row submitted and not acknowledged as stored, in the order submitted."""
        return [r for seq in sorted(self._unacked) for r in self._unacked[seq]]

    def _collect(self) -> None:
        """Take the acknowledgements that arrived; restart a writer that died."""
        while True:
            try:
                seq, error = self._acks.get_nowait()
            except queue.Empty:
                break
            if error is None:
                for record in self._unacked.pop(seq, ()):  # stored: the chunk times go
                    record.chunk_offsets_ns = record.chunk_tokens = None
                self._deaths = 0
            else:
                self._error = self._error or error
        if self._unacked and not self._error and not self._proc.is_alive():
            self._restart()

    def _restart(self) -> None:
        self._deaths += 1
        if self._deaths > MAX_RESTARTS:
            self._error = f"the results writer process died {MAX_RESTARTS + 1} times in a row"
            return
        self._start()
        for seq in sorted(self._unacked):
            self._inbox.put((seq, self._unacked[seq]))
        if self._on_restart:
            self._on_restart(len(self.unwritten))

    def _check(self) -> None:
        if self._error:
            raise WriterError(f"results could not be stored: {self._error}")

    async def flush(self) -> None:
        """Wait until every submitted round is on disk (cancellable: nothing is dropped)."""
        while True:
            self._collect()
            self._check()
            if not self._unacked:
                return
            await asyncio.sleep(_FLUSH_POLL_S)

    def drain(self, patience_s: float = math.inf) -> bool:
        """`flush`, blocking, for at most `patience_s`: for the run's end, outside the measured
        levels. Whether every round is on disk."""
        deadline = time.monotonic() + patience_s
        while True:
            self._collect()
            self._check()
            if not self._unacked:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(_FLUSH_POLL_S)

    def close(self, patience_s: float = math.inf) -> None:
        """Write what is queued, waiting at most `patience_s` (a stop cannot wait out another
        process's lock on the file), then stop the writer process; what it had not stored by
        then stays in `unwritten`."""
        deadline = time.monotonic() + patience_s
        drained = False
        try:
            drained = self.drain(patience_s)
        finally:
            if drained:
                self._inbox.put(None)
                self._proc.join(min(30.0, max(0.0, deadline - time.monotonic())))
            if self._proc.is_alive():
                self._proc.kill()
                self._inbox.cancel_join_thread()  # rounds left in its pipe must not hold exit
