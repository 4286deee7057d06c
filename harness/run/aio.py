"""Run a coroutine on uvloop where it is installed (lower per-chunk cost), else asyncio, and
stop it the one way that cannot strand a transport: a stop signal cancels the main task.

The stop signals are SIGINT (Ctrl-C), SIGTERM (`kill`) and SIGHUP (a closed terminal, a
dropped SSH session); each takes the same path. A signal handler that raises can fire inside
any callback, a transport's included, where the loop logs the exception and carries on (the
run went on after `kill`). Cancelling the task instead unwinds every await in order; `Stopped`
then tells the caller which signal it was. A cancellation can be lost (Python 3.11's
`wait_for` drops one that meets its inner future's completion), so the stop is sent again
every `_RESTOP_S` until the task ends. A wait that blocks the loop's thread (a results file
locked by another process) cannot be cancelled: it asks `stopping()` instead.
"""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")
_RESTOP_S = 0.25
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_received: list[int] = []  # the stop signals the run in progress received, in order


class Stopped(KeyboardInterrupt):
    """The run was stopped by a signal; `signum` says which (exit status 128 + signum)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def stopping() -> int | None:
    """The signal that asked the run in progress to stop, None while none has; set the moment
    the signal arrives, even while the loop's thread is blocked."""
    return _received[0] if _received else None


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop]:
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop
    return uvloop.new_event_loop


async def _stoppable(coro: Coroutine[Any, Any, T]) -> T:
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None  # Runner.run runs this as its main task
    _received.clear()

    def stop() -> None:
        if not task.done():
            task.cancel()
            loop.call_later(_RESTOP_S, stop)

    def on_signal(signum: int, frame: object) -> None:
        """Runs between two bytecodes of the loop's thread: it records and schedules only."""
        _received.append(signum)
        if len(_received) == 1:
            loop.call_soon_threadsafe(stop)

    if threading.current_thread() is not threading.main_thread():
        return await coro  # signals reach the main thread only
    previous = {signum: signal.signal(signum, on_signal) for signum in STOP_SIGNALS}
    try:
        return await coro
    except (asyncio.CancelledError, KeyboardInterrupt) as exc:
        if _received and not isinstance(exc, Stopped):
            raise Stopped(_received[0]) from None
        raise
    finally:
        for signum, handler in previous.items():
            if handler is not None:  # None: set outside Python, nothing to restore
                signal.signal(signum, handler)


async def until_ns(deadline_ns: int) -> None:
    """Sleep until the monotonic clock (perf_counter_ns) reads `deadline_ns`: a loop, as the
    event loop's timers may fire up to a millisecond early."""
    while (delay := (deadline_ns - time.perf_counter_ns()) / 1e9) > 0:
        await asyncio.sleep(delay)


def run(coro: Coroutine[Any, Any, T]) -> T:
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(_stoppable(coro))
