"""Nothing measured is lost: a killed writer, a full disk, a target that dies mid-run.

Each test starts its own mock server and a real `engram-bench run` process on 127.0.0.1.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import httpx
import pytest

from harness.results import spill
from harness.results.store import Store, fill_token_timing
from runners.lifecycle import free_port
from tests.helpers import ROOT, run_cli, stored_rows, wait_for_port, wait_while_running

RUN = [sys.executable, "-m", "engram_bench", "run"]  # stderr: its progress lines


def _mock(*flags: str) -> tuple[str, subprocess.Popen]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "harness.mock_server", "--port", str(port),
                             *flags], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            cwd=ROOT)
    wait_for_port(port)
    return f"http://127.0.0.1:{port}/v1", proc


def _start_run(*flags: str) -> subprocess.Popen:
    return subprocess.Popen([*RUN, *flags], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _interrupted_run(db: Path, rows: int, interrupt: Callable[[subprocess.Popen], object],
                     *flags: str) -> tuple[int, str]:
    """A run writing results file `db`, interrupted (`interrupt(its process)`) once it has
    stored `rows` requests (its first round): its exit status and stderr once it ended."""
    proc = _start_run(*flags, "--db", str(db))
    wait_while_running(lambda: stored_rows(db) >= rows, proc, "a first stored round")
    interrupt(proc)
    _, err = proc.communicate(timeout=120)
    return proc.returncode, err


def _writer_pid(parent: int, timeout: float = 10) -> int:
    """The round writer: the run's child started by multiprocessing's spawn (not its
    resource tracker). Children are found by their parent id in /proc/*/stat, whichever
    thread started them; the scan is repeated, as one can miss a process mid-read."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                ppid = int(stat.read_text().rpartition(")")[2].split()[1])
                cmdline = (stat.parent / "cmdline").read_bytes()
            except (OSError, ValueError, IndexError):
                continue  # gone meanwhile
            if (ppid == parent and b"spawn_main" in cmdline
                    and b"resource_tracker" not in cmdline):
                return int(stat.parent.name)
        time.sleep(0.1)
    raise AssertionError("no writer process found")


def test_a_killed_writer_is_restarted_and_every_measured_request_is_stored(tmp_path):
    url, server = _mock("--ttft-ms", "5", "--itl-ms", "4")  # ~8 s in all: the kill lands
    try:  # while rounds are still to come (a writer killed after the last one restarts never)
        db = tmp_path / "b.duckdb"
        code, err = _interrupted_run(
            db, 4, lambda proc: os.kill(_writer_pid(proc.pid), signal.SIGKILL), "--url", url,
            "--levels", "2,4", "--rounds", "30", "--output-tokens", "32", "--no-progress")
        assert code == 0, err
        # said with the progress off too: nothing stored says it
        assert "the results writer process died: restarted it" in " ".join(err.split())
        assert "Traceback" not in err
        run = Store(db).runs()[0]
        assert run.status == "complete"
        stored = [r.request_id for r in Store(db).requests(run.run_id)]
        # the server's own log: every measured request it answered is stored, once
        timings = httpx.get(url.removesuffix("/v1") + "/mock/timings").json()
        answered = {t["request_id"] for t in timings  # less the calibration's (C=0)
                    if not t["request_id"].startswith(run.run_id + "-c0-")}
        assert len(stored) == len(set(stored)) == 2 * 30 + 4 * 30
        assert set(stored) == answered
    finally:
        server.kill()


@pytest.fixture
def small_disk(tmp_path) -> Iterator[tuple[Path, Callable[[], None] | None, Callable[[], None]]]:
    """A folder on a full-able disk: (folder, preexec_fn for the run, give it room). As root,
    a 2 MB tmpfs; otherwise a 900 KB file-size limit (RLIMIT_FSIZE) on the run's process."""
    folder = tmp_path / "disk"
    folder.mkdir()
    mounted = os.geteuid() == 0 and subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(folder)],
        capture_output=True).returncode == 0
    if mounted:
        def room() -> None:
            subprocess.run(["mount", "-o", "remount,size=64m", str(folder)], check=True)
        yield folder, None, room
        subprocess.run(["umount", "-l", str(folder)], check=False)
        return

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (900_000, 900_000))
    yield folder, limit, lambda: None


def test_a_full_disk_stops_the_run_at_once_and_resume_recovers_every_measured_row(small_disk):
    folder, limit, make_room = small_disk
    url, server = _mock("--ttft-ms", "2", "--itl-ms", "0.5")
    levels = "16,32" if limit is None else "32,64"  # a size limit takes a longer sweep to fill
    try:
        db = folder / "b.duckdb"
        full = subprocess.run([*RUN, "--url", url, "--levels", levels, "--rounds", "60",
                               "--output-tokens", "16", "--db", str(db)],
                              cwd=ROOT, capture_output=True, text=True, timeout=240,
                              preexec_fn=limit)
        assert full.returncode == 1, full.stderr
        assert "Traceback" not in full.stderr and "failed: results could not be" in full.stderr
        run_id = Store(db).runs()[0].run_id
        [(path, kept)] = spill.pending(db, run_id)
        assert f"kept in {path}" in full.stderr and kept
        stored = {r.request_id: r for r in Store(db).requests(run_id)}
        measured = {**stored, **{r.request_id: r for r in kept}}
        assert len(measured) == len(stored) + len(kept)  # no row in both places

        make_room()
        resumed = run_cli("run", "--resume", run_id, "--url", url, "--db", str(db), "--json",
                          timeout=240)
        assert resumed.returncode == 0, resumed.stderr
        said = "".join(resumed.stderr.split())  # progress lines fold at 80 columns
        assert "".join(f"stored the {len(kept)} rows kept in {path}".split()) in said
        assert not path.exists()
        after = {r.request_id: r for r in Store(db).requests(run_id)}
        for rid, record in measured.items():  # every row measured before the disk filled
            back = after[rid]  # the file keeps times to the microsecond
            fill_token_timing(record)  # what the store works out from a kept row's chunks
            assert back == replace(record, sent_at=back.sent_at, chunk_offsets_ns=None,
                                   chunk_tokens=None), rid
            assert back.sent_at == pytest.approx(record.sent_at, abs=1e-6)
        c1, c2 = map(int, levels.split(","))
        assert len(after) == (c1 + c2) * 60
        assert Store(db).run(run_id).status == "complete"
        assert json.loads(resumed.stdout)["levels"]
    finally:
        server.kill()


def test_a_target_that_dies_mid_run_fails_the_run(tmp_path):
    url, server = _mock("--ttft-ms", "20", "--itl-ms", "2")  # ~15 s in all: the kill lands
    db = tmp_path / "b.duckdb"
    code, err = _interrupted_run(db, 3, lambda _: server.kill(), "--url", url, "--levels",
                                 "1,2,4", "--rounds", "100", "--output-tokens", "16")
    assert code == 1, err
    assert "the server stopped answering at C=" in err and "Traceback" not in err
    run = Store(db).runs()[0]
    assert run.status == "failed" and "stopped answering" in run.error
    kinds = {r.error_kind for r in Store(db).requests(run.run_id)}
    assert "connect_error" in kinds  # the round that showed it is stored, as it was


def test_keep_going_stores_a_dead_target_as_errors_and_completes(tmp_path):
    url, server = _mock("--ttft-ms", "20", "--itl-ms", "2")  # ~5 s of C=1: the kill lands
    db = tmp_path / "b.duckdb"
    code, err = _interrupted_run(db, 3, lambda _: server.kill(), "--url", url, "--levels",
                                 "1,2", "--rounds", "100", "--output-tokens", "16",
                                 "--keep-going", "--connect-timeout", "1")
    assert code == 0, err
    run = Store(db).runs()[0]
    assert run.status == "complete"
    records = Store(db).requests(run.run_id)
    assert len(records) == 100 + 2 * 100
    assert any(r.error_kind == "connect_error" for r in records)


def test_a_results_file_deleted_mid_run_is_put_back_and_resume_completes_the_run(tmp_path):
    url, server = _mock("--ttft-ms", "5", "--itl-ms", "2")  # ~10 s in all: the deletion lands
    try:  # while rounds are still to come
        db = tmp_path / "b.duckdb"
        code, err = _interrupted_run(db, 4, lambda _: db.unlink(), "--url", url, "--levels",
                                     "2,4", "--rounds", "40", "--output-tokens", "16")
        assert code == 1, err
        said = " ".join(err.split())  # progress lines fold at 80 columns
        assert "Traceback" not in err and f"the results file {db} was deleted" in said, err
        run = Store(db).runs()[0]  # put back as it was, the run marked failed in it
        assert run.status == "failed"
        for path, _ in spill.pending(db, run.run_id):  # whatever the writer had not stored
            assert f"kept in {path}" in said
        resumed = run_cli("run", "--resume", run.run_id, "--url", url, "--db", str(db),
                          timeout=120)
        assert resumed.returncode == 0, resumed.stderr
        assert Store(db).run(run.run_id).status == "complete"
        stored = [r.request_id for r in Store(db).requests(run.run_id)]
        assert len(stored) == len(set(stored)) == 2 * 40 + 4 * 40
    finally:
        server.kill()
