"""A stop always stops: SIGTERM and Ctrl-C at random moments of a run, 20 of each.

Runs under `make test-faults` (ENGRAM_TEST_FAULTS=1; about two minutes), which `.ci/run`
calls; `make test` skips it. Each stop lands anywhere from start-up through calibration, a
closed level, a users lead-in or a rate schedule, and must end the process within 5 s with
128 + the signal, the run (if one was stored yet) aborted and no row stored as ok that the
stop cut short.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.results.store import Store
from tests.conftest import ROOT, free_port, wait_for_port

if os.environ.get("ENGRAM_TEST_FAULTS") != "1":
    pytest.skip("the many-stops tests run under `make test-faults` (ENGRAM_TEST_FAULTS=1)",
                allow_module_level=True)

OUTPUT_TOKENS = 48
STOPS = 20
SWEEPS = (  # each runs far longer than the latest stop
    ("--levels", "1,4,16", "--rounds", "60"),
    ("--mode", "users", "--levels", "8", "--rounds", "40", "--think-time", "0.1"),
    ("--mode", "rate", "--rates", "40", "--duration", "30"),
    ("--levels", "2,8", "--rounds", "40", "--repeat", "2"),
)


@pytest.fixture(scope="module")
def server_url():
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "harness.mock_server", "--port", str(port),
                             "--ttft-ms", "20", "--itl-ms", "2"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=ROOT)
    wait_for_port(port)
    yield f"http://127.0.0.1:{port}/v1"
    proc.kill()


def _stop_once(url: str, db: Path, sweep: tuple[str, ...], signum: int,
               after_s: float) -> str | None:
    """One run stopped `after_s` into its life; what went wrong, or None."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "engram_bench", "run", "--url", url, "--db", str(db),
         "--output-tokens", str(OUTPUT_TOKENS), "--no-progress", *sweep],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(after_s)
    if proc.poll() is not None:
        return f"ended by itself before the stop: {proc.communicate()}"
    proc.send_signal(signum)
    t0 = time.monotonic()
    try:
        _, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        return "still running 30 s after the stop"
    took = time.monotonic() - t0
    if took > 5:
        return f"took {took:.1f} s to stop"
    if proc.returncode != 128 + signum:
        return f"exit {proc.returncode}: {err[-500:]}"
    if "Traceback" in err:
        return f"a traceback: {err[-800:]}"
    runs = Store(db).runs() if db.exists() else []
    for run in runs:  # none yet when the stop came before the run was stored
        if run["status"] != "aborted":
            return f"run {run['run_id']} is {run['status']}"
        cut = [r.request_id for r in Store(db).requests(run["run_id"])
               if r.ok and (r.output_tokens != OUTPUT_TOKENS or r.finish_reason != "length")]
        if cut:
            return f"rows stored as ok that were cut short: {cut[:3]}"
    return None


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_every_stop_at_a_random_moment_ends_the_run_in_time(server_url, tmp_path, signum):
    rng = random.Random(f"stops-{signum}")
    failures = []
    for i in range(STOPS):
        sweep = SWEEPS[i % len(SWEEPS)]
        after_s = rng.uniform(0.05, 4.0)
        why = _stop_once(server_url, tmp_path / f"stop{i}.duckdb", sweep, signum, after_s)
        if why:
            failures.append(f"stop {i} at {after_s:.2f} s ({' '.join(sweep)}): {why}")
    assert not failures, "\n".join(failures)
