"""`run --workers N`: a level's load split across worker processes, checked on the fake
server's own log: every request stored once and timed as the server saw it; a worker killed
mid-level fails the run with a sentence and keeps what was measured, and the resume completes
it; flags that cannot work are one sentence."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import duckdb
import httpx
import pytest

from harness.results.store import Store
from harness.run import aio
from harness.run.workers import Link, link_pair
from tests.helpers import ROOT, group_alive, run_cli, stored_rows, wait_while_running


def _server_ttft(url: str) -> dict[str, float]:
    return {t["request_id"]: (t["first_write"] - t["body_read"]) * 1000
            for t in httpx.get(url[:-3] + "/mock/timings").json() if t["first_write"]}


def _served(url: str, concurrency: int) -> int:
    """The requests of the level at `concurrency` the fake server has read so far."""
    return sum(1 for t in httpx.get(url[:-3] + "/mock/timings").json()
               if f"-c{concurrency}-r" in t["request_id"])


def test_two_workers_store_every_request_once_timed_as_the_server_saw_it(mock_process,
                                                                        tmp_path):
    """C=256 split across two processes: 512 requests, each (round, stream) stored once, their
    TTFT never under the server's own and within 5 ms of it on average once the level runs.
    The first round's 256 requests reach the server at once, and it logs each from when it
    read it: the wait in its socket is in the harness's TTFT (as a user's), not in its log, so
    that round is held only to never reading less."""
    url = mock_process("--ttft-ms", "150", "--ttft-jitter-ms", "200", "--itl-ms", "40",
                       "--tokens-per-chunk", "8")
    db = tmp_path / "b.duckdb"
    done = run_cli("run", "--url", url, "--levels", "256", "--rounds", "2", "--workers", "2",
                   "--output-tokens", "8", "--input-tokens", "16", "--db", str(db), "--json",
                   "--no-progress", timeout=300)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["workers"] == 2 and summary["levels"][0]["requests"] == 512
    records = Store(db).requests(summary["run_id"])
    assert sorted((r.round, r.worker) for r in records) == [
        (rnd, w) for rnd in range(2) for w in range(256)]
    assert all(r.ok for r in records)
    server = _server_ttft(url)
    bias = {r.request_id: r.ttft_ms - server[r.request_id] for r in records}
    assert min(bias.values()) >= 0, min(bias.values())
    running = [bias[r.request_id] for r in records if r.round > 0]
    assert sum(running) / len(running) <= 5.0, sum(running) / len(running)
    plain = run_cli("summary", "--db", str(db))
    assert "2 load processes" in plain.stdout


def _worker_pids(parent: int) -> list[int]:
    """The run's load workers: its spawned children holding TCP connections (the results
    writer holds none)."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            if int(stat[1]) != parent:
                continue
            sockets = sum(1 for fd in (entry / "fd").iterdir()
                          if os.readlink(fd).startswith("socket:"))
        except (OSError, IndexError, ValueError):
            continue
        if sockets >= 4:
            out.append(int(entry.name))
    return out


def test_a_killed_worker_fails_the_run_in_one_sentence_and_resume_completes_it(
        mock_process, tmp_path):
    url = mock_process("--ttft-ms", "20", "--itl-ms", "5")
    db = tmp_path / "b.duckdb"
    args = ("run", "--url", url, "--levels", "8", "--rounds", "40", "--workers", "2",
            "--output-tokens", "16", "--input-tokens", "16", "--db", str(db), "--no-progress")
    proc = subprocess.Popen([sys.executable, "-m", "engram_bench", *args], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    wait_while_running(lambda: stored_rows(db) >= 16, proc, "two rounds stored")
    victims = _worker_pids(proc.pid)
    assert len(victims) == 2, victims
    os.kill(victims[0], signal.SIGKILL)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err
    assert "died (exit code -9) at C=8" in err and "Traceback" not in err
    assert "measured requests are stored" in err
    run = Store(db).runs()[0]
    assert run.status == "failed"
    kept = stored_rows(db)
    assert 16 <= kept < 320
    time.sleep(0.5)
    assert not group_alive(proc.pid), "a process of the failed run is left"
    again = run_cli("run", "--resume", run.run_id, "--url", url, "--db", str(db), "--json",
                    "--no-progress", timeout=300)
    assert again.returncode == 0, again.stderr
    records = Store(db).requests(run.run_id)
    assert sorted((r.round, r.worker) for r in records) == [
        (rnd, w) for rnd in range(40) for w in range(8)]


def test_a_level_a_killed_worker_left_short_under_keep_going_is_flagged_and_resumed(
        mock_process, tmp_path):
    """--keep-going measures the next level after a worker dies, then ends the run failed
    (not complete) naming the level left short; the summary flags it, and --resume sends what
    it misses."""
    url = mock_process("--ttft-ms", "20", "--itl-ms", "5")
    db = tmp_path / "b.duckdb"
    args = ("run", "--url", url, "--levels", "4,8", "--rounds", "30", "--workers", "2",
            "--keep-going", "--output-tokens", "16", "--input-tokens", "16", "--db", str(db),
            "--no-progress")
    proc = subprocess.Popen([sys.executable, "-m", "engram_bench", *args], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    # the server's count, not the stored rows: the writer, at nice 19 beside a busy suite,
    # can store them after the workers are past the level, and the kill meets no work left
    wait_while_running(lambda: _served(url, 4) >= 16, proc, "four rounds served at C=4")
    os.kill(_worker_pids(proc.pid)[0], signal.SIGKILL)
    _, err = proc.communicate(timeout=120)
    said = " ".join(err.split())
    assert proc.returncode == 1, err
    assert "C=4 left short by a load worker that died" in said and "Traceback" not in err
    run = Store(db).runs()[0]
    assert run.status == "failed"
    summary = json.loads(run_cli("summary", "--db", str(db), "--json").stdout)
    short = {lv["concurrency"]: lv["missing_rounds"] for lv in summary["levels"]}
    assert 0 < short[4] < 30 and short[8] == 0, short
    assert any(w.startswith("C=4 is short") for w in summary["warnings"]), summary["warnings"]
    again = run_cli("run", "--resume", run.run_id, "--url", url, "--db", str(db), "--json",
                    "--no-progress", timeout=300)
    assert again.returncode == 0, again.stderr
    resumed = json.loads(again.stdout)
    assert resumed["status"] == "complete"
    assert {lv["concurrency"]: lv["missing_rounds"] for lv in resumed["levels"]} == {4: 0, 8: 0}
    records = Store(db).requests(run.run_id)
    assert sorted((r.concurrency, r.round, r.worker) for r in records) == sorted(
        (c, rnd, w) for c in (4, 8) for rnd in range(30) for w in range(c))


def test_a_complete_run_short_of_a_round_is_flagged_and_resumed(mock_process, tmp_path):
    """A run stored complete with a level short of a round part-stored (as --keep-going left
    one after a worker died, before such a run ended failed): flagged, and --resume sends
    the round again whole."""
    url = mock_process()
    db = tmp_path / "b.duckdb"
    done = run_cli("run", "--url", url, "--levels", "2", "--rounds", "3", "--output-tokens",
                   "4", "--input-tokens", "16", "--db", str(db), "--json", "--no-progress")
    assert done.returncode == 0, done.stderr
    run_id = json.loads(done.stdout)["run_id"]
    with duckdb.connect(str(db)) as con:
        con.execute("DELETE FROM requests WHERE run_id = ? AND round = 1 AND worker = 0",
                    [run_id])
    summary = json.loads(run_cli("summary", "--db", str(db), "--json").stdout)
    assert summary["status"] == "complete" and summary["levels"][0]["missing_rounds"] == 1
    assert (f"C=2 is short: 2 of its 3 rounds are stored whole; `run --resume {run_id}` "
            "measures the rest") in summary["warnings"]
    again = run_cli("run", "--resume", run_id, "--url", url, "--db", str(db), "--json",
                    "--no-progress")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["levels"][0]["missing_rounds"] == 0
    assert sorted((r.round, r.worker) for r in Store(db).requests(run_id)) == [
        (rnd, w) for rnd in range(3) for w in range(2)]
    once_more = run_cli("run", "--resume", run_id, "--url", url, "--db", str(db))
    assert once_more.returncode == 2 and "is already complete" in once_more.stderr


def test_workers_whose_main_process_is_killed_end_quietly(mock_process, tmp_path):
    """kill -9 of the main process mid-level: its load workers (and the writer and scraper
    beside them) end on their own, and what they inherited as stderr, the main process's,
    holds no traceback and no warning of semaphores left behind."""
    url = mock_process("--ttft-ms", "20", "--itl-ms", "5")
    db = tmp_path / "b.duckdb"
    err_path = tmp_path / "stderr.txt"
    with err_path.open("w") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "engram_bench", "run", "--url", url, "--levels", "8",
             "--rounds", "400", "--workers", "2", "--output-tokens", "16", "--input-tokens",
             "16", "--db", str(db), "--no-progress"],
            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err, start_new_session=True)
    wait_while_running(lambda: stored_rows(db) >= 16, proc, "two rounds stored")
    assert len(_worker_pids(proc.pid)) == 2
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    deadline = time.monotonic() + 10
    while group_alive(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not group_alive(proc.pid), "a process of the killed run is left"
    said = err_path.read_text()
    assert "Traceback" not in said and "Error" not in said, said
    assert "leaked" not in said, said


@pytest.mark.parametrize(("flags", "message"), [
    (("--workers", "0"), "--workers: must be a positive integer or auto, not '0'"),
    (("--workers", "-2"), "--workers: must be a positive integer or auto"),
    (("--workers", "3", "--levels", "1,2"), "--workers 3 is more than the highest level's 2"),
    (("--workers", "100000"), "--workers must be from 1 to"),
    (("--workers", "2", "--mode", "users", "--levels", "4"),
     "--workers splits the levels of modes closed, rate, trace, trace-closed"),
])
def test_workers_that_cannot_work_are_one_sentence(tmp_path, flags, message):
    done = run_cli("run", "--url", "http://127.0.0.1:9/v1", *flags, "--db",
                   str(tmp_path / "b.duckdb"))
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert "Traceback" not in done.stderr


def test_auto_picks_by_the_highest_level_and_says_so(tmp_path):
    done = run_cli("run", "--url", "http://127.0.0.1:9/v1", "--levels", "1,2",
                   "--workers", "auto", "--db", str(tmp_path / "b.duckdb"))
    assert "--workers auto: 1 load process (C up to 2, one per 512" in done.stderr


def _flood(link: Link, messages: int) -> None:
    """A worker's loop as it runs: reading its incoming pipe (which makes that descriptor
    non-blocking), writing `messages` out."""
    async def write() -> None:
        asyncio.get_running_loop().add_reader(link.incoming.fileno(), lambda: None)
        for _ in range(messages):
            link.send(("record", "x" * 1000))

    with asyncio.Runner(loop_factory=aio.loop_factory()) as runner:
        runner.run(write())


def test_a_worker_writes_on_while_its_reader_lags():
    """Far more than a pipe holds, sent while nobody reads: the writer waits, then all of it
    arrives (a lagging main process or Ray relay slows a worker, and never fails it)."""
    ours, theirs = link_pair()
    writer = threading.Thread(target=_flood, args=(theirs, 2000))
    writer.start()
    time.sleep(0.5)
    assert writer.is_alive(), "the pipe held it all: the test sends too little"
    got = [ours.incoming.recv() for _ in range(2000)]
    writer.join(5)
    assert not writer.is_alive() and len(got) == 2000
