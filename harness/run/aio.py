"""Run a coroutine on uvloop where it is installed (lower per-chunk cost), else asyncio, and
stop it the one way that cannot strand a transport: SIGTERM cancels the main task.

A signal handler that raises can fire inside any callback, a transport's included, where the
loop logs the exception and carries on (the run went on after `kill`). Cancelling the task
instead unwinds every await in order; `Stopped` then tells the caller which signal it was.
SIGINT already takes that path through asyncio.Runner. A cancellation can be lost (Python
3.11's `wait_for` drops one that meets its inner future's completion), so the stop is sent
again every `_RESTOP_S` until the task ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")
_RESTOP_S = 0.25


class Stopped(KeyboardInterrupt):
    """The run was stopped by a signal; `signum` says which (exit status 128 + signum)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


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
    received: list[int] = []
    previous = signal.getsignal(signal.SIGTERM)

    def stop() -> None:
        if not task.done():
            received.append(signal.SIGTERM)
            task.cancel()
            loop.call_later(_RESTOP_S, stop)

    try:
        loop.add_signal_handler(signal.SIGTERM, stop)
    except (ValueError, RuntimeError, NotImplementedError):  # not the main thread
        return await coro
    try:
        return await coro
    except asyncio.CancelledError:
        if received:
            raise Stopped(received[0]) from None
        raise
    finally:
        with contextlib.suppress(ValueError, RuntimeError):
            loop.remove_signal_handler(signal.SIGTERM)
            if previous is not None:  # removing the handler set the default action
                signal.signal(signal.SIGTERM, previous)


def run(coro: Coroutine[Any, Any, T]) -> T:
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(_stoppable(coro))
