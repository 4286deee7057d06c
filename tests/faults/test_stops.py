"""A stop always stops: SIGTERM, Ctrl-C and a closed terminal's SIGHUP at random moments of a
run (one with its load split across worker processes among them), 20 of each, and 20 stops
during calibration.

Marked `faults`: runs under `make test-faults` (about four minutes), which `.ci/run` calls;
`make test` leaves it out. Each stop lands anywhere from start-up (once engram-bench's
first handlers are in: a signal that comes while the interpreter starts takes its default
action) through calibration, a closed level, a users lead-in or a rate schedule, and must end
the process within 5 s with 128 + the signal and no traceback, none of its processes left:
the run aborted (and said so)
with no row stored as ok that the stop cut short, or, stopped before the run was stored,
"nothing stored" said. A SIGHUP goes to the run's whole process group, as a closed
terminal's does.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from harness.results.store import Store
from runners.lifecycle import free_port
from tests.helpers import ROOT, group_alive, wait_for_port

pytestmark = pytest.mark.faults

OUTPUT_TOKENS = 48
STOPS = 20
SWEEPS = (  # each runs far longer than the latest stop
    ("--levels", "1,4,16", "--rounds", "60"),
    ("--mode", "users", "--levels", "8", "--rounds", "40", "--think-time", "0.1"),
    ("--mode", "rate", "--rates", "40", "--duration", "30"),
    ("--levels", "2,8", "--rounds", "40", "--repeat", "2"),
    ("--levels", "4,16", "--rounds", "60", "--workers", "2"),
)


SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
CALIBRATION_TTFT_MS = 150  # a probe is 8 requests, so the first answer leaves >= 1 s of it


def _mock(*flags: str):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "harness.mock_server", "--port", str(port),
                             *flags], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            cwd=ROOT)
    wait_for_port(port)
    yield f"http://127.0.0.1:{port}/v1"
    proc.kill()


@pytest.fixture(scope="module")
def server_url():
    yield from _mock("--ttft-ms", "20", "--itl-ms", "2")


@pytest.fixture(scope="module")
def slow_server_url():
    yield from _mock("--ttft-ms", str(CALIBRATION_TTFT_MS), "--itl-ms", "2")


def _catches(pid: int, signum: int) -> bool:
    """Whether the process has a handler for `signum` yet (the SigCgt mask of its status)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = next((line.split()[1] for line in status.splitlines()
                   if line.startswith("SigCgt:")), "0")
    return bool(int(caught, 16) >> (signum - 1) & 1)


def _stop_once(url: str, db: Path, sweep: tuple[str, ...], signum: int,
               wait: Callable[[subprocess.Popen], None]) -> tuple[str | None, float]:
    """One run stopped once `wait(proc)` returns; what went wrong (or None), and the seconds
    it took to end after the stop."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "engram_bench", "run", "--url", url, "--db", str(db),
         "--output-tokens", str(OUTPUT_TOKENS), "--no-progress", *sweep],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True)
    deadline = time.monotonic() + 30
    while not _catches(proc.pid, signal.SIGHUP) and proc.poll() is None:  # the last one set
        assert time.monotonic() < deadline, "the run never installed its signal handlers"
        time.sleep(0.005)
    wait(proc)
    if proc.poll() is not None:
        return f"ended by itself before the stop: {proc.communicate()}", 0.0
    if signum == signal.SIGHUP:
        os.killpg(proc.pid, signum)
    else:
        proc.send_signal(signum)
    t0 = time.monotonic()
    try:
        _, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        return "still running 30 s after the stop", 30.0
    took = time.monotonic() - t0
    if took > 5:
        return f"took {took:.1f} s to stop", took
    gone_by = time.monotonic() + 2  # its load workers, writer and bar, the tracker
    while (left := group_alive(proc.pid)) and time.monotonic() < gone_by:
        time.sleep(0.05)
    if left:
        return f"processes of the run left running 2 s after it ended: {left}", took
    if proc.returncode != 128 + signum:
        return f"exit {proc.returncode}: {err[-500:]}", took
    if "Traceback" in err:
        return f"a traceback: {err[-800:]}", took
    runs = Store(db).runs() if db.exists() else []
    if not runs and "nothing stored" not in err:
        return f"no run stored, and not said so: {err[-500:]}", took
    for run in runs:
        if run.status != "aborted":
            return f"run {run.run_id} is {run.status}", took
        if f"--resume {run.run_id}" not in err:
            return f"run {run.run_id} aborted, and not said so: {err[-500:]}", took
        cut = [r.request_id for r in Store(db).requests(run.run_id)
               if r.ok and (r.output_tokens != OUTPUT_TOKENS or r.finish_reason != "length")]
        if cut:
            return f"rows stored as ok that were cut short: {cut[:3]}", took
    return None, took


def _judge(outcomes: list[tuple[str, str | None, float]]) -> None:
    """Every stop went right; the longest one is printed (pytest -rP shows it)."""
    print(f"{len(outcomes)} stops, the longest ended {max(t for _, _, t in outcomes):.2f} s "
          "after its signal")
    failures = [f"{what}: {why}" for what, why, _ in outcomes if why]
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("signum", SIGNALS, ids=[s.name for s in SIGNALS])
def test_every_stop_at_a_random_moment_ends_the_run_in_time(server_url, tmp_path, signum):
    rng = random.Random(f"stops-{signum}")
    outcomes = []
    for i in range(STOPS):
        sweep = SWEEPS[i % len(SWEEPS)]
        after_s = rng.uniform(0.05, 4.0)
        why, took = _stop_once(server_url, tmp_path / f"stop{i}.duckdb", sweep, signum,
                               lambda proc, s=after_s: time.sleep(s))
        outcomes.append((f"stop {i} at {after_s:.2f} s ({' '.join(sweep)})", why, took))
    _judge(outcomes)


def test_every_stop_during_calibration_ends_the_run_in_time(slow_server_url, tmp_path):
    """Each stop lands a random moment after the first calibration request was answered,
    before the run is stored."""
    rng = random.Random("stops-calibration")
    timings = slow_server_url.removesuffix("/v1") + "/mock/timings"

    def calibrating(proc: subprocess.Popen, after_s: float) -> None:
        deadline = time.monotonic() + 30
        while not httpx.get(timings).json() and proc.poll() is None:
            assert time.monotonic() < deadline, "no calibration request arrived"
            time.sleep(0.01)
        time.sleep(after_s)

    outcomes = []
    for i in range(STOPS):
        signum = SIGNALS[i % len(SIGNALS)]
        after_s = rng.uniform(0, 0.8)
        httpx.get(timings + "?clear=1")
        why, took = _stop_once(slow_server_url, tmp_path / f"cal{i}.duckdb", SWEEPS[0], signum,
                               lambda proc, s=after_s: calibrating(proc, s))
        outcomes.append((f"{signum.name} {after_s:.2f} s into calibration", why, took))
    stored = sum(1 for i in range(STOPS) if Store(tmp_path / f"cal{i}.duckdb").runs())
    print(f"{STOPS - stored} of {STOPS} stopped before the run was stored")
    _judge(outcomes)
    assert stored == 0, f"{stored} of {STOPS} stops landed after calibration, not in it"
