"""`run --ray`: the load workers as Ray actors on a cluster of two nodes, checked on the fake
server's own log: every request stored once, timed as the server saw it, each node's clock
offset within what its round trip allows (both nodes read this machine's clock); a killed
actor or a stop ends the run in one sentence with what was measured kept, and an address
with no cluster is one sentence within the connect timeout."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from harness.results.store import Store
from tests.helpers import ROOT, processes, run_cli, stored_rows, wait_while_running

pytestmark = pytest.mark.distributed


def _server_ttft(url: str) -> dict[str, float]:
    return {t["request_id"]: (t["first_write"] - t["body_read"]) * 1000
            for t in httpx.get(url[:-3] + "/mock/timings").json() if t["first_write"]}


def _relays() -> list[int]:
    """The load workers' actor processes (Ray names them after the actor's class)."""
    return [pid for pid, cmd in processes(lambda e: (e / "cmdline").read_bytes()).items()
            if cmd.startswith(b"ray::Relay")]


def _wait_gone(what: list[int], timeout_s: float) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while (left := [pid for pid in what if pid in _relays()]) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


def _two_rounds_in(url: str, db: Path, ray_address: str,
                   rounds: int) -> tuple[subprocess.Popen, list[int]]:
    """A C=8 run of `rounds` across two actors, once two rounds are stored; the actors."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "engram_bench", "run", "--url", url, "--levels", "8",
         "--rounds", str(rounds), "--workers", "2", "--ray", ray_address, "--output-tokens",
         "16", "--input-tokens", "16", "--db", str(db), "--no-progress"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_while_running(lambda: stored_rows(db) >= 16, proc, "two rounds stored", 120)
    return proc, _relays()


def test_two_nodes_store_every_request_once_timed_as_the_server_saw_it(
        ray_address, mock_process, tmp_path):
    url = mock_process("--ttft-ms", "100", "--ttft-jitter-ms", "100", "--itl-ms", "20",
                       "--tokens-per-chunk", "4")
    db = tmp_path / "b.duckdb"
    done = run_cli("run", "--url", url, "--levels", "8,64", "--rounds", "2", "--workers", "2",
                   "--ray", ray_address, "--output-tokens", "8", "--input-tokens", "16",
                   "--db", str(db), "--json", "--no-progress", timeout=300)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["workers"] == 2 and [lv["requests"] for lv in summary["levels"]] == [16, 128]
    hosts = summary["load_hosts"]
    assert [h["worker"] for h in hosts] == [0, 1]
    assert len({h["node_id"] for h in hosts}) == 2, "both load workers ran on one node"
    for h in hosts:  # one machine's clock read from two nodes: the truth is 0
        assert abs(h["clock_offset_ms"]) <= h["round_trip_ms"] / 2 + 0.01, h
    records = Store(db).requests(summary["run_id"])
    assert sorted((r.concurrency, r.round, r.worker) for r in records) == [
        (c, rnd, w) for c in (8, 64) for rnd in range(2) for w in range(c)]
    assert all(r.ok for r in records)
    server = _server_ttft(url)
    bias = [r.ttft_ms - server[r.request_id] for r in records]
    assert min(bias) >= 0, min(bias)
    assert sum(bias) / len(bias) <= 5.0, sum(bias) / len(bias)
    sent = sorted(r.sent_at for r in records if r.concurrency == 64 and r.round == 0)
    assert sent[-1] - sent[0] < 0.05, "the two nodes did not start the level together"
    plain = run_cli("summary", "--db", str(db))
    assert "2 load processes on 2 Ray nodes" in plain.stdout


def test_a_killed_actor_fails_the_run_in_one_sentence_keeping_what_was_measured(
        ray_address, mock_process, tmp_path):
    db = tmp_path / "b.duckdb"
    proc, actors = _two_rounds_in(mock_process("--ttft-ms", "20", "--itl-ms", "5"), db,
                                  ray_address, 40)
    assert len(actors) == 2, actors
    os.kill(actors[0], signal.SIGKILL)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, err
    assert "of 2 died (Ray actor on" in err and "at C=8" in err, err
    assert "measured requests are stored" in err and "Traceback" not in err
    assert Store(db).runs()[0].status == "failed"
    assert 16 <= stored_rows(db) < 320
    assert not _wait_gone(actors, 10), "an actor of the failed run is left"


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_ends_a_ray_run_within_5_s_as_aborted(ray_address, mock_process, tmp_path,
                                                     signum):
    db = tmp_path / "b.duckdb"
    proc, actors = _two_rounds_in(mock_process("--ttft-ms", "20", "--itl-ms", "5"), db,
                                  ray_address, 200)
    sent = time.monotonic()
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=30)
    assert time.monotonic() - sent < 5, err
    assert proc.returncode == 128 + signum, err
    assert "aborted; run" in err and "Traceback" not in err
    assert Store(db).runs()[0].status == "aborted"
    assert not _wait_gone(actors, 10), "an actor of the stopped run is left"


def test_an_address_without_a_cluster_is_one_sentence_within_the_connect_timeout(tmp_path):
    with socket.socket() as quiet:  # a port that accepts, where no Ray answers
        quiet.bind(("127.0.0.1", 0))
        quiet.listen()
        port = quiet.getsockname()[1]
        started = time.monotonic()
        done = run_cli("run", "--url", "http://127.0.0.1:9/v1", "--ray", f"127.0.0.1:{port}",
                       "--connect-timeout", "3", "--db", str(tmp_path / "b.duckdb"))
        took = time.monotonic() - started
    assert done.returncode == 2 and "is no Ray cluster this process could join" in done.stderr
    assert took < 3 + 5, took  # the timeout, and this interpreter's start
    refused = run_cli("run", "--url", "http://127.0.0.1:9/v1", "--ray", "127.0.0.1:9",
                      "--db", str(tmp_path / "b.duckdb"))
    assert refused.returncode == 2 and "no Ray cluster answers at 127.0.0.1:9" in refused.stderr
    for said in (done, refused):
        assert len(said.stderr.strip().splitlines()) == 1, said.stderr


def test_a_mode_sent_from_one_process_is_refused_on_a_cluster(ray_address, tmp_path):
    done = run_cli("run", "--url", "http://127.0.0.1:9/v1", "--mode", "users", "--levels", "4",
                   "--ray", ray_address, "--db", str(tmp_path / "b.duckdb"))
    assert done.returncode == 2, done.stderr
    assert "mode users sends its load from one process" in done.stderr


def test_more_workers_than_the_cluster_can_hold_is_one_sentence(ray_address, tmp_path):
    done = run_cli("run", "--url", "http://127.0.0.1:9/v1", "--levels", "64", "--workers", "17",
                   "--ray", ray_address, "--db", str(tmp_path / "b.duckdb"))
    assert done.returncode == 2, done.stderr
    assert "--workers must be from 1 to 16 (4 per CPU of the Ray cluster" in done.stderr

