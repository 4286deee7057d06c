"""A run's helper processes (the results writer, the metrics scraper) leave its stdout alone:
it carries `--json` and CSV, and DuckDB draws a progress bar there for a slow statement. The
writer waits for the CPU behind the timing loop and a local server; the scraper does not."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

from harness.records import RequestRecord
from harness.results.store import Store
from harness.run.writer import BackgroundWriter
from harness.wire.scraper import Scraper

# DuckDB's bar, provoked at once: its delay lowered to 0 ms, then a statement that has work
_SLOW_STATEMENT = ("import duckdb\n"
                   "con = duckdb.connect()\n"
                   "con.execute('SET progress_bar_time = 0')\n"
                   "con.execute('SELECT count(*) FROM range(20000000) t(a) WHERE a % 7 = 3')"
                   ".fetchall()\n")


def _stdout_of(script: str) -> str:
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_a_process_that_stepped_back_draws_no_progress_bar_on_stdout():
    assert "elapsed" in _stdout_of(_SLOW_STATEMENT)  # the bar, where nothing stepped back
    stepped_back = "from common.background import step_back\nstep_back()\n" + _SLOW_STATEMENT
    assert _stdout_of(stepped_back) == ""


def _stdout_and_nice(pid: int | None) -> tuple[str, int]:
    assert pid is not None
    return os.readlink(f"/proc/{pid}/fd/1"), os.getpriority(os.PRIO_PROCESS, pid)


def test_the_writer_steps_back(tmp_path):
    store = Store(tmp_path / "b.duckdb")
    store.initialise()
    background = BackgroundWriter(store, "run-1")
    try:
        background.submit([RequestRecord("r0", 1, 0, 0, 1.7e9)])
        assert background.drain(patience_s=120)  # acknowledged: the child is past its start
        assert _stdout_and_nice(background._proc.pid) == (os.devnull, 19)
    finally:
        background.close()


def test_the_scraper_leaves_stdout_at_the_runs_own_priority():
    """Its samples must fall while a level runs: at nice 19 behind a busy server on this host
    they fell in the pauses between rounds (benchmarks/scrape_under_load.py)."""
    async def started() -> tuple[str, int]:
        scraper = Scraper(None)
        try:
            await scraper.start()  # answered: the child is past its start
            return _stdout_and_nice(scraper._proc.pid)
        finally:
            scraper.close()
    assert asyncio.run(started()) == (os.devnull, os.getpriority(os.PRIO_PROCESS, 0))
