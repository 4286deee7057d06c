"""`run --table-state` against the fake server: what is refused before any load is sent (no
--host-metrics, a budget without warm, an agent that knows no table), and a drop that pages
another process holds mapped and locked defeat: the run says so, goes on, and claims no cold
start."""

from __future__ import annotations

import json
import os
import re

import pandas as pd

from common.host_metrics import COLD_SHARE
from explorer.data import host_levels
from harness.mock_server import MockConfig, ThreadedMockServer
from harness.records import RequestRecord
from harness.results.cold_start import NOT_COLD, first_level, first_ttft_ms, state_at_start
from harness.results.store import Store
from tests.helpers import FAST, host_agent, metrics_text, on_disk, run_cli, start_agent
from tests.runners.test_host_agent import _table
from tests.runners.test_table_state import _locker


def _run(url: str, tmp_path, *flags: str):
    return run_cli("run", "--url", url, "--levels", "1,2", "--rounds", "2", "--db",
                   str(tmp_path / "bench.duckdb"), "--no-progress", *flags)


def _error(proc) -> str:
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    [line] = [ln for ln in proc.stderr.splitlines() if ln.startswith("engram-bench: error:")]
    return line


def test_table_state_without_an_agent_or_with_a_budget_but_not_warm_is_refused(tmp_path):
    url = "http://127.0.0.1:9/v1"
    assert "--host-metrics" in _error(_run(url, tmp_path, "--table-state", "cold"))
    assert "--table-state warm" in _error(_run(
        url, tmp_path, "--table-state", "cold", "--host-metrics", "http://127.0.0.1:9/metrics",
        "--warm-budget-gb", "1"))
    assert "--idle" in _error(_run(url, tmp_path, "--idle", "-1"))


def test_an_agent_given_no_table_is_refused_before_any_load(tmp_path):
    with ThreadedMockServer(MockConfig(**FAST)) as server, host_agent(os.getpid()) as host:
        line = _error(_run(server.url, tmp_path, "--host-metrics", host, "--table-state",
                           "warm"))
        sent = server.server.requests_seen
    assert "start it with --table PATH" in line and sent == 0


def test_a_node_exporter_cannot_set_the_table_state(tmp_path):
    with (metrics_text(lambda: "node_vmstat_pgmajfault 7\n") as url,
          ThreadedMockServer(MockConfig(**FAST)) as server):
        line = _error(_run(server.url, tmp_path, "--host-metrics", url, "--table-state",
                           "cold"))
        sent = server.server.requests_seen
    assert "is a node_exporter, which cannot drop or read the table" in line and sent == 0


def test_a_drop_locked_pages_defeat_is_said_and_no_cold_start_is_claimed(tmp_path):
    on_disk(tmp_path)
    table = _table(tmp_path, 256)
    with _locker(table), ThreadedMockServer(MockConfig(**FAST)) as server, \
            start_agent("--pid", str(os.getpid()), "--table", str(table)) as (host, _, _):
        proc = _run(server.url, tmp_path, "--host-metrics", host, "--table-state", "cold",
                    "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    said = [ln for ln in proc.stderr.splitlines() if "stay in the page cache after the drop" in ln]
    assert len(said) == 1 and said[0].endswith("so the table is not cold"), proc.stderr
    assert "table state: cold" not in proc.stderr
    levels = {row["concurrency"]: row for row in json.loads(proc.stdout)["levels"]}
    assert levels[1]["host"]["table_state"] == NOT_COLD
    assert levels[2]["host"]["table_state"] is None
    assert any(w.startswith("C=1: --table-state cold was asked, but 1.0 MiB")
               for w in json.loads(proc.stdout)["warnings"])


def _record(c: int, sent_at: float, ttft: float | None, repeat: int = 0) -> RequestRecord:
    return RequestRecord(request_id=f"{c}-{sent_at}", concurrency=c, round=0, worker=0,
                         sent_at=sent_at, ttft_ms=ttft, repeat=repeat)


def test_the_first_pass_and_its_first_requests_are_those_that_met_the_state():
    records = [_record(2, 5.0, 30.0), _record(4, 1.0, 900.0), _record(4, 1.1, 700.0),
               _record(4, 1.2, None), _record(4, 1.3, 800.0), _record(4, 2.0, 50.0),
               _record(4, 9.0, 10.0, repeat=1)]
    assert first_level(records) == (4, None)
    assert first_ttft_ms(records, (4, None)) == (800.0, 3)  # the 4 first, one without a TTFT
    cold_limit = COLD_SHARE * 1000.0  # the residency a cold table of 1000 bytes may keep
    assert state_at_start("cold", 1000.0, cold_limit) == "cold"
    assert state_at_start("cold", 1000.0, cold_limit * 1.05) == NOT_COLD
    assert state_at_start("cold", 1000.0, None) == NOT_COLD
    assert state_at_start("warm", 1000.0, 900.0) == "warm"


def test_idle_waits_between_levels_and_says_the_residency_before_and_after(tmp_path):
    table = _table(tmp_path, 16)
    with ThreadedMockServer(MockConfig(**FAST)) as server, \
            start_agent("--pid", str(os.getpid()), "--table", str(table)) as (host, _, _):
        proc = run_cli("run", "--url", server.url, "--levels", "1,2", "--rounds", "1",
                       "--db", str(tmp_path / "bench.duckdb"), "--host-metrics", host,
                       "--table-state", "warm", "--idle", "0.2")
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout + proc.stderr
    assert "table state: warm on " in out and "read 0.1 MiB, 0.1 MiB of 0.1 MiB resident" in out
    idle = [ln for ln in out.splitlines() if ln.startswith("idle 0.2 s: the table's residency")]
    assert len(idle) == 1 and idle[0].endswith("went from 0.1 MiB to 0.1 MiB"), out
    # the residency the agent read beside the state asked, the table all resident
    assert re.search(r"C=1 started on a warm table \(--table-state; ([\d.]+ \w+) of \1 "
                     r"resident, as the agent read it\): TTFT of its first 1 request ", out), out
    (run,) = Store(tmp_path / "bench.duckdb").runs()  # the explorer's host table: the same
    host = host_levels(tmp_path / "bench.duckdb", run.run_id, pd.DataFrame())
    states = dict(zip(host["concurrency"], host["table_state"], strict=True))
    assert states[1] == "warm" and pd.isna(states[2])
    assert (host["table_state_requests"].iloc[0], host["table_state_ttft_ms"].iloc[0] > 0) == \
        (1, True)
