"""The bundled server as a real deployment is measured: started by hand (`engram-bench serve
--device spark`, its table on disk and cold), `engram-bench agent` on its process and table
file beside it, and `run --url ... --host-metrics`. The bytes read from disk per output token
that the run stores per level agree with the server's own /stats and with the process's
/proc/PID/io read over each level, as the test reads it; and a server `run --device` starts
gets an agent of its own."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.results.store import Store
from runners.lifecycle import free_port
from tests.helpers import ROOT, host_agent, on_disk, run_cli

AGREE = 0.05  # the host figure against /stats and against /proc/PID/io
# the tiny preset (a 256-token context), a table 0.25 GiB on disk of which spark's page cache
# holds a sixth: every level reads from the disk
SERVE = ("--device", "spark", "--preset", "tiny", "--table-size-gb", "0.25",
         "--cache-state", "cold")
LOAD = ("--prompts", "text", "--levels", "1,2", "--rounds", "3", "--input-tokens", "64",
        "--output-tokens", "64", "--no-progress")


@contextlib.contextmanager
def _server(tmp_path: Path) -> Iterator[tuple[subprocess.Popen, str]]:
    port, log = free_port(), tmp_path / "server.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-m", "engram_bench", "serve", *SERVE,
                                 "--table-path", str(tmp_path / "table.bin"), "--port",
                                 str(port)], cwd=tmp_path, stdout=out, stderr=subprocess.STDOUT,
                                env={**os.environ, "PYTHONPATH": str(ROOT)})
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "the bundled server did not start"
            with contextlib.suppress(OSError), \
                    urllib.request.urlopen(f"{url}/health", timeout=1):
                break
            time.sleep(0.2)
        yield proc, url
    finally:
        proc.terminate()
        proc.wait(30)


class _ReadBytes:
    """The process's /proc/PID/io read_bytes every 10 ms, stamped with the wall clock."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _read(self) -> int:
        with open(f"/proc/{self.pid}/io") as f:
            return next(int(line.split()[1]) for line in f if line.startswith("read_bytes:"))

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.time(), self._read()))
            time.sleep(0.01)

    def __enter__(self) -> _ReadBytes:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def over(self, start: float, end: float) -> int:
        """What the process read from the last reading before `start` to the first after
        `end`: the server is idle between levels, so nothing else falls in between."""
        before = max((s for s in self.samples if s[0] <= start), default=self.samples[0])
        after = min((s for s in self.samples if s[0] >= end), default=self.samples[-1])
        assert before[0] <= start and after[0] >= end, "the window is outside the readings"
        return after[1] - before[1]


def _near(got: float, want: float) -> bool:
    return abs(got - want) <= AGREE * max(abs(got), abs(want))


def test_disk_bytes_per_output_token_agree_with_stats_and_proc_io_per_level(tmp_path):
    on_disk(tmp_path)
    db = tmp_path / "bench.duckdb"
    with _server(tmp_path) as (server, url), _ReadBytes(server.pid) as proc_io, \
            host_agent(server.pid, tmp_path / "table.bin") as agent:
        run = run_cli("run", "--url", f"{url}/v1", *LOAD, "--host-metrics", agent,
                      "--db", str(db), "--json", timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    summary = json.loads(run.stdout)
    store = Store(db)
    records = store.requests(summary["run_id"])
    stats = {row["concurrency"]: row for row in store.server_stats(summary["run_id"])}
    with store.read_only() as con:
        windows = dict(((c, (start, end)) for c, start, end in con.execute(
            "SELECT concurrency, min(epoch_us(started_at)) / 1e6, "
            "max(epoch_us(started_at) / 1e6 + width_s) FROM host_slices WHERE run_id = ? "
            "GROUP BY concurrency", [summary["run_id"]]).fetchall()))
    for level in summary["levels"]:
        c, host = level["concurrency"], level["host"]
        tokens = sum(r.output_tokens or 0 for r in records if r.concurrency == c)
        got = host["tree_read_bytes_per_output_token"]
        from_stats = (stats[c]["after"]["disk_read_bytes"]
                      - stats[c]["before"]["disk_read_bytes"]) / tokens
        from_proc = proc_io.over(*windows[c]) / tokens
        assert got is not None and got > 0, host  # a cold table is read from disk
        assert _near(got, from_stats), (c, got, from_stats)
        assert _near(got, from_proc), (c, got, from_proc)
        assert host["table_bytes"] > 0 and host["table_resident_bytes_end"] is not None
        assert host["missing"] is None


def test_a_bundled_server_run_starts_an_agent_on_it(tmp_path):
    on_disk(tmp_path)
    run = run_cli("run", *SERVE, "--prompts", "text", "--levels", "1", "--rounds", "2",
                  "--input-tokens", "64", "--output-tokens", "32", "--no-progress", "--json",
                  "--db", str(tmp_path / "bench.duckdb"), timeout=600, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    [level] = json.loads(run.stdout)["levels"]
    host = level["host"]
    assert host is not None and host["source"] == "engram-bench agent", level
    # the server's table file, on nvme: its size and residency from the agent
    assert host["table_bytes"] == pytest.approx(0.25 * 2**30, rel=0.01)
    assert host["table_resident_bytes_end"] is not None
    assert host["tree_read_bytes_per_output_token"] is not None
    assert host["peak_rss_file_bytes"] > 0


def test_a_table_state_for_a_server_whose_table_is_in_memory_is_refused_in_one_sentence(
        tmp_path):
    db = tmp_path / "bench.duckdb"
    run = run_cli("run", "--device", "spark", "--preset", "tiny", "--table-size-gb", "0.004",
                  "--placement", "host", "--table-state", "cold", "--levels", "1",
                  "--rounds", "1", "--no-progress", "--db", str(db), timeout=300, cwd=tmp_path)
    assert run.returncode == 2, run.stderr[-3000:]
    [error] = [line for line in run.stderr.splitlines() if line.startswith("engram-bench:")]
    assert error == ("engram-bench: error: --table-state drops or warms the table's file, and "
                     "the bundled Engram server started here reads its table from none (it is "
                     "in memory, or there is no table): drop --table-state, or place the table "
                     "in a file (the bundled server: --placement nvme)")
    assert "Traceback" not in run.stderr
    if db.exists():  # nothing was measured, so no run is stored
        assert Store(db).runs() == []
