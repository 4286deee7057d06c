"""Stops that end a run promptly and say what they left: a closed terminal (SIGHUP), a stop
before the run is stored (during calibration), a stop while another process holds the
results file's lock. `make test-faults` stops runs at many random moments."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

from harness.results import spill
from harness.results.store import Store
from harness.run.session import CALIBRATION_SAMPLES
from tests.helpers import ROOT, run_cli, stored_rows, wait_while_running

RUN = [sys.executable, "-m", "engram_bench", "run", "--no-progress"]


def _start(url: str, db: Path, *flags: str, **popen: object) -> subprocess.Popen:
    return subprocess.Popen([*RUN, "--url", url, "--db", str(db), *flags], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            **popen)  # type: ignore[call-overload]


def _stop(proc: subprocess.Popen, signum: int, group: bool = False,
          timeout_s: float = 15) -> str:
    """Send the stop `signum` (to the run's whole process group with `group`, as a closed
    terminal hangs up); the run must end by it within 5 s. Its stderr."""
    t0 = time.monotonic()
    if group:
        os.killpg(proc.pid, signum)
    else:
        proc.send_signal(signum)
    try:
        _, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise AssertionError(f"still running {timeout_s} s after the stop") from None
    took = time.monotonic() - t0
    assert proc.returncode == 128 + signum, err
    assert took < 5, f"the stop took {took:.1f} s"
    return err


@contextlib.contextmanager
def _lock_held(db: Path) -> Iterator[None]:
    """Another process holds a writer connection to `db` (as a DuckDB shell on it does),
    taken between the run's short connections, until the block ends."""
    holder = subprocess.Popen(
        [sys.executable, "-c", "import duckdb, sys, time\n"
         "while True:\n"
         "    try:\n"
         "        con = duckdb.connect(sys.argv[1]); break\n"
         "    except duckdb.IOException:\n"
         "        time.sleep(0.002)\n"
         "print('held', flush=True)\n"
         "time.sleep(60)\n", str(db)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        yield
    finally:
        holder.kill()
        holder.wait()


def test_a_closed_terminal_aborts_the_run_as_sigterm_does(mock_process, tmp_path):
    """The hang-up reaches the run's whole process group (its writer and multiprocessing's
    resource tracker too), as a closed terminal's does."""
    url = mock_process("--ttft-ms", "5", "--itl-ms", "2")
    db = tmp_path / "b.duckdb"
    proc = _start(url, db, "--levels", "4", "--rounds", "200", "--output-tokens", "32",
                  start_new_session=True)
    wait_while_running(lambda: stored_rows(db) >= 8, proc, "two stored rounds")
    err = _stop(proc, signal.SIGHUP, group=True)
    assert "Traceback" not in err and "leaked" not in err, err
    run = Store(db).runs()[0]
    assert run.status == "aborted"
    assert f"--resume {run.run_id}" in err


def test_a_stop_during_calibration_says_nothing_was_stored(mock_process, tmp_path):
    url = mock_process("--ttft-ms", "250", "--itl-ms", "1")  # 8 probes of 0.25 s at least
    db = tmp_path / "b.duckdb"
    proc = _start(url, db, "--levels", "1", "--rounds", "2", "--output-tokens", "4")
    timings = url.removesuffix("/v1") + "/mock/timings"
    wait_while_running(lambda: httpx.get(timings).json(), proc, "a calibration request")
    err = _stop(proc, signal.SIGTERM)
    assert "stopped before the run started; nothing stored" in err, err
    assert "--resume" not in err  # there is nothing to resume
    assert Store(db).runs() == []


def test_a_stop_while_another_process_holds_the_file_spills_and_ends_at_once(
        mock_process, tmp_path):
    url = mock_process("--ttft-ms", "5", "--itl-ms", "3")
    db = tmp_path / "b.duckdb"
    rounds = 150  # over 50 ms each: the run is still measuring when the stop comes, however
    # long the holder takes to start on a busy machine (the stop ends it long before)
    proc = _start(url, db, "--levels", "2", "--rounds", str(rounds), "--output-tokens", "16")
    wait_while_running(lambda: stored_rows(db) >= 4, proc, "two stored rounds")
    with _lock_held(db):
        time.sleep(0.5)  # rounds measured meanwhile wait for the lock
        assert proc.poll() is None, "the run ended before the stop: give it more rounds"
        err = _stop(proc, signal.SIGTERM)
    assert "Traceback" not in err, err
    run_id = Store(db).runs()[0].run_id
    named = re.search(r"kept in (\S+\.unstored\.jsonl)", err)
    assert named, err
    assert [str(path) for path, _ in spill.pending(db, run_id)] == [named.group(1)]
    resumed = run_cli("run", "--resume", run_id, "--url", url, "--db", str(db))
    assert resumed.returncode == 0, resumed.stderr
    assert Store(db).run(run_id).status == "complete"
    ids = [r.request_id for r in Store(db).requests(run_id)]
    assert len(ids) == len(set(ids)) == 2 * rounds
    assert not Path(named.group(1)).exists()  # its rows are in the file now


def test_a_stop_while_the_run_waits_to_store_itself_ends_at_once(mock_process, tmp_path):
    """The lock taken during calibration: the run then waits for it on its event loop's thread
    (no cancellation reaches that wait), to store itself."""
    url = mock_process("--ttft-ms", "100", "--itl-ms", "1")
    db = tmp_path / "b.duckdb"
    proc = _start(url, db, "--levels", "1", "--rounds", "2", "--output-tokens", "4")
    timings = url.removesuffix("/v1") + "/mock/timings"
    wait_while_running(lambda: httpx.get(timings).json(), proc, "a calibration request")
    with _lock_held(db):
        answered: list[int] = []

        def calibrated() -> bool:  # whole probes answered, then none for 5 TTFTs
            answered.append(len(httpx.get(timings).json()))
            time.sleep(0.1)
            return (len(answered) > 5 and answered[-6] == answered[-1]
                    and answered[-1] % CALIBRATION_SAMPLES == 0)
        wait_while_running(calibrated, proc, "the end of calibration")
        err = _stop(proc, signal.SIGTERM)
    assert "stopped before the run started; nothing stored" in err, err
    assert Store(db).runs() == []
