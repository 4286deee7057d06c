"""SIGTERM stops a run even where a cancellation is lost on the way."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest

from harness.run import aio


def test_sigterm_stops_a_task_that_swallowed_the_first_cancellation():
    """As Python 3.11's wait_for can: the first cancel is absorbed, the stop is sent again."""
    swallowed = []

    async def stubborn() -> None:
        loop = asyncio.get_running_loop()
        loop.call_later(0.05, os.kill, os.getpid(), signal.SIGTERM)
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            swallowed.append(time.monotonic())
        await asyncio.sleep(30)

    t0 = time.monotonic()
    with pytest.raises(aio.Stopped) as stopped:
        aio.run(stubborn())
    assert stopped.value.signum == signal.SIGTERM
    assert swallowed and time.monotonic() - t0 < 5
