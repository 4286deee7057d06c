"""A timer on the timing loop that measures how late it fires, the process's CPU share, the
time the loop's thread waited for a CPU (the kernel's run-queue wait, /proc/thread-self/
schedstat), the received bytes waiting unread in the sockets, and how long each request's first
token waited in its socket before the loop read it (the client's TCP_INFO reads, harness.wire.
client) (harness.results.client_check judges them).

The monitor brackets every measured pass of every load process, so it also holds Python's
full garbage collections off the loop for the pass (harness.run.collector).

One callback every `interval_s` (20 ms: 50 a second, ~0.15 ms of CPU each on an idle 2-core VM,
most of it the wake-up itself, so ~0.7 % of a core; a busy loop is awake anyway); the sockets are
asked for their unread bytes every tenth tick (one ioctl per connection)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

from harness.results.client_check import ClientCheck, check
from harness.run import collector
from harness.wire.client import FIRST_READ_LAGS_MS

SCHEDSTAT = Path("/proc/thread-self/schedstat")

INTERVAL_S = 0.02
UNREAD_EVERY = 10


class LoopMonitor:
    """`start()` at a level's start, `stop()` at its end gives the level's ClientCheck."""

    def __init__(self, unread_bytes: Callable[[], int] | None = None,
                 interval_s: float = INTERVAL_S) -> None:
        self._unread_bytes = unread_bytes
        self._interval_ns = int(interval_s * 1e9)
        self._interval_s = interval_s
        self._handle: asyncio.TimerHandle | None = None
        self._lags_ms: list[float] = []
        self._unread: list[int] = []
        self._due_ns = 0
        self._ticks = 0
        self._cpu0 = 0.0
        self._wall0 = 0.0
        self._wait0: int | None = None

    def start(self) -> None:
        """In the loop's thread: its run-queue wait is the thread's own."""
        collector.hold()
        FIRST_READ_LAGS_MS.clear()
        self._lags_ms, self._unread, self._ticks = [], [], 0
        self._cpu0, self._wall0 = time.process_time(), time.perf_counter()
        self._wait0 = run_queue_wait_ns()
        self._arm(time.perf_counter_ns())

    def _arm(self, now_ns: int) -> None:
        self._due_ns = now_ns + self._interval_ns
        self._handle = asyncio.get_running_loop().call_later(self._interval_s, self._tick)

    def _tick(self) -> None:
        now_ns = time.perf_counter_ns()
        self._lags_ms.append(max(0, now_ns - self._due_ns) / 1e6)
        self._ticks += 1
        if self._unread_bytes is not None and self._ticks % UNREAD_EVERY == 0:
            self._unread.append(self._unread_bytes())
        self._arm(now_ns)

    def stop(self) -> ClientCheck:
        collector.release()
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        wait = run_queue_wait_ns()
        waited = None if wait is None or self._wait0 is None else (wait - self._wait0) / 1e9
        reads = FIRST_READ_LAGS_MS[:]
        FIRST_READ_LAGS_MS.clear()
        return check(self._lags_ms, time.process_time() - self._cpu0,
                     time.perf_counter() - self._wall0, self._unread, waited, reads)


def run_queue_wait_ns() -> int | None:
    """Nanoseconds this thread has spent runnable but waiting for a CPU (None: the kernel
    does not say)."""
    try:
        return int(SCHEDSTAT.read_text().split()[1])
    except (OSError, ValueError, IndexError):
        return None
