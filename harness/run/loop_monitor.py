"""A timer on the timing loop that measures how late it fires, the process's CPU share, and
the received bytes waiting unread in the sockets (harness.results.client_check judges them).

One callback every `interval_s` (10 ms: ~100 cheap callbacks a second); the sockets are
asked for their unread bytes every tenth tick (one ioctl per connection)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from harness.results.client_check import ClientCheck, check

INTERVAL_S = 0.01
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

    def start(self) -> None:
        self._lags_ms, self._unread, self._ticks = [], [], 0
        self._cpu0, self._wall0 = time.process_time(), time.perf_counter()
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
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        return check(self._lags_ms, time.process_time() - self._cpu0,
                     time.perf_counter() - self._wall0, self._unread)
