"""How a run's helper process (the results writer, the metrics scraper) stays out of the way:
the timing loop and a server on this host come first, and stdout stays the parent's."""

from __future__ import annotations

import os


def step_back() -> None:
    """Lower this process to the least priority, and leave stdout."""
    os.nice(19)
    leave_stdout()


def leave_stdout() -> None:
    """Point this process's stdout at /dev/null. Stdout carries the parent's `--json` and
    CSV; DuckDB draws a progress bar there for a statement that runs past 2 s, and a
    connection's first statement (the one that turns the bar off) ran that long in a writer
    at nice 19 behind a busy vLLM, which broke a run's `--json`."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
    finally:
        os.close(devnull)
